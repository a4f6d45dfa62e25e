"""Tasks with verifiable answers: seeded generators, the committed ``data/*.jsonl`` splits, and GSM8K.

    from grpo_lessons.training.data import get_task
    task = get_task("arithmetic")
    rows = task.rows("train")            # [{"id", "prompt": [system, user], "question", "answer", ...}, ...]
    task.reward_funcs, task.reward_weights
    task.prompt("What is 2 + 3?")        # -> [{"role": "system", ...}, {"role": "user", ...}]

Rows follow TRL's conversational format: ``prompt`` is a list of chat messages, and the other
columns (``answer``; ``numbers`` and ``target``) reach the reward functions as keyword arguments.
Generation is pure Python with a private ``random.Random(seed)``, so ``python -m grpo_lessons.training.data
--out data`` rewrites the committed files byte for byte (a test checks) and ``task.rows(split)``
gives the same rows without reading any file (a pip-installed package has no ``data/``).
Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; the choice of difficulty and prompt is
measured in ``data/PROBE.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from grpo_lessons.core.rewards import arithmetic_reward, countdown_reward, format_reward
from grpo_lessons.core.rewards.safe_math import safe_arith

__all__ = [
    "ArithmeticSpec",
    "ARITHMETIC_LEVELS",
    "DEFAULT_ARITHMETIC",
    "CountdownSpec",
    "countdown_question",
    "PROMPTS",
    "Task",
    "TASKS",
    "SPLITS",
    "get_task",
    "load_task",
    "arithmetic_rows",
    "countdown_rows",
    "make_messages",
    "write_jsonl",
    "read_jsonl",
    "write_all",
    "load_gsm8k",
    "main",
]

SPLITS = ("train", "test")
SYSTEM_PROMPT = "You are a helpful assistant."

#: Prompt styles: a system message and the text appended to the question.  The probe of the base
#: model (data/PROBE.md) chose the arithmetic default; the others stay for the notebook's comparison.
PROMPTS: dict[str, tuple[str, str]] = {
    "plain": (SYSTEM_PROMPT, ""),
    "only_number": (SYSTEM_PROMPT, " Reply with only the number."),
    "calculator": (
        "You are a calculator. Reply to each question with only the result, for example: What is 3 + 5? 8",
        "",
    ),
    "equation": (SYSTEM_PROMPT, " Reply with the equation and its result, for example: 2 + 2 = 4."),
    "answer_tag": (SYSTEM_PROMPT, " Put the final answer in <answer></answer> tags."),
    "think_answer": (
        SYSTEM_PROMPT,
        " Think briefly, then give the final answer in <answer></answer> tags.",
    ),
}


def make_messages(question: str, style: str = "plain", system: str | None = None) -> list[dict]:
    """``[{"role": "system", ...}, {"role": "user", ...}]`` for one question in a prompt ``style``."""
    if style not in PROMPTS:
        raise ValueError(f"unknown prompt style {style!r}; known: {sorted(PROMPTS)}")
    default_system, suffix = PROMPTS[style]
    return [
        {"role": "system", "content": default_system if system is None else system},
        {"role": "user", "content": question + suffix},
    ]


# ---------------------------------------------------------------------------------------------
# Arithmetic: "What is 17 - 9?"
# ---------------------------------------------------------------------------------------------

_OP_SYMBOL = {"+": "+", "-": "-", "*": "*"}


DEFAULT_MAX_NEW_TOKENS = 32  # completion budget of a task that does not set its own


@dataclass(frozen=True)
class ArithmeticSpec:
    """How hard the arithmetic questions are.

    ``ops``: which of ``+ - *`` appear; operands are drawn uniformly from ``[min_operand, max_operand]``
    (for ``*`` the second factor from ``[2, max_factor]``); with ``allow_negative=False`` subtraction
    puts the larger number first.
    """

    ops: str = "+"
    min_operand: int = 10
    max_operand: int = 99
    max_factor: int = 9
    allow_negative: bool = False
    prompt_style: str = "plain"

    def __post_init__(self):
        if not self.ops or any(o not in _OP_SYMBOL for o in self.ops):
            raise ValueError(f"ops must be a non-empty subset of '+-*', got {self.ops!r}")
        if not 0 <= self.min_operand <= self.max_operand:
            raise ValueError(f"need 0 <= min_operand <= max_operand, got {self.min_operand}, {self.max_operand}")
        if self.max_factor < 2:
            raise ValueError(f"max_factor must be >= 2, got {self.max_factor}")
        if self.prompt_style not in PROMPTS:
            raise ValueError(f"unknown prompt style {self.prompt_style!r}; known: {sorted(PROMPTS)}")


#: Named difficulties (the probe in data/PROBE.md measures the base model on each).
ARITHMETIC_LEVELS: dict[str, ArithmeticSpec] = {
    "1digit": ArithmeticSpec(ops="+-", min_operand=0, max_operand=9),
    "1digit_mul": ArithmeticSpec(ops="+-*", min_operand=0, max_operand=9, max_factor=9),
    "upto20": ArithmeticSpec(ops="+-", min_operand=0, max_operand=20),
    "2digit_add": ArithmeticSpec(ops="+", min_operand=10, max_operand=99),
    "2digit": ArithmeticSpec(ops="+-", min_operand=10, max_operand=99),
    "mixed": ArithmeticSpec(ops="+-*", min_operand=2, max_operand=99, max_factor=9),
    "3digit": ArithmeticSpec(ops="+-", min_operand=100, max_operand=999),
}


def _arithmetic_question(rng: random.Random, spec: ArithmeticSpec) -> tuple[str, int]:
    op = rng.choice(spec.ops)
    a = rng.randint(spec.min_operand, spec.max_operand)
    if op == "*":
        b = rng.randint(2, spec.max_factor)
        return f"What is {a} * {b}?", a * b
    b = rng.randint(spec.min_operand, spec.max_operand)
    if op == "-" and not spec.allow_negative and b > a:
        a, b = b, a
    return f"What is {a} {_OP_SYMBOL[op]} {b}?", a + b if op == "+" else a - b


def _unique_rows(n: int, seed: int, make: Callable[[random.Random], tuple[str, dict]],
                 exclude: set[str], what: str) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    seen = set(exclude)
    out = []
    for _ in range(200 * n + 1000):
        if len(out) == n:
            return out
        key, row = make(rng)
        if key in seen:
            continue
        seen.add(key)
        out.append((key, row))
    raise ValueError(f"could not draw {n} distinct {what} questions (only {len(out)}); widen the ranges")


def arithmetic_rows(n: int, seed: int, spec: ArithmeticSpec = ArithmeticSpec(), *, split: str = "train",
                    exclude: set[str] | frozenset = frozenset()) -> list[dict]:
    """``n`` distinct arithmetic rows (none whose question is in ``exclude``), deterministic in ``seed``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")

    def make(rng):
        q, ans = _arithmetic_question(rng, spec)
        return q, {"question": q, "answer": ans}

    rows = []
    for i, (q, r) in enumerate(_unique_rows(n, seed, make, set(exclude), "arithmetic")):
        rows.append({"id": f"arithmetic-{split}-{i:04d}", "prompt": make_messages(q, spec.prompt_style), **r})
    return rows


# ---------------------------------------------------------------------------------------------
# Countdown: "Using the numbers [4, 7, 9], make 19."
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CountdownSpec:
    """Countdown instances: ``n_numbers`` numbers from ``[1, max_number]``, a target in ``[min_target, max_target]``
    reachable with ``+ - * /`` using each number at most once (every intermediate value a positive integer)."""

    n_numbers: int = 3
    max_number: int = 20
    min_target: int = 10
    max_target: int = 100
    use_all_numbers: bool = True  # the stored solution uses all; the reward only requires "at most once"

    def __post_init__(self):
        if not 2 <= self.n_numbers <= 6:
            raise ValueError(f"n_numbers must be in 2..6, got {self.n_numbers}")
        if self.max_number < 2 or not 1 <= self.min_target <= self.max_target:
            raise ValueError("need max_number >= 2 and 1 <= min_target <= max_target")


COUNTDOWN_SYSTEM = SYSTEM_PROMPT


def countdown_question(numbers: Sequence[int], target: int) -> str:
    """The user message for one instance."""
    return (
        f"Using the numbers {list(numbers)}, write an arithmetic expression that equals {target}. "
        "You may use + - * / and parentheses, and each number at most once. "
        "Give only the expression in <answer></answer> tags, for example <answer>(1 + 2) * 3</answer>."
    )


def _random_solution(rng: random.Random, numbers: list[int]) -> tuple[int, str] | None:
    """Combine the numbers in a random order with random operators; None if a step is not a positive integer."""
    order = numbers[:]
    rng.shuffle(order)
    value, expr = order[0], str(order[0])
    for i, x in enumerate(order[1:]):
        op = rng.choice("+-*/")
        wrapped = f"({expr})" if i > 0 else expr
        if op == "+":
            value, expr = value + x, f"{expr} + {x}"
        elif op == "-":
            if value > x:
                value, expr = value - x, f"{expr} - {x}"
            elif x > value:
                value, expr = x - value, f"{x} - {wrapped}"
            else:
                return None
        elif op == "*":
            value, expr = value * x, f"{wrapped} * {x}"
        else:
            if x > 1 and value % x == 0:
                value, expr = value // x, f"{wrapped} / {x}"
            elif value > 1 and x % value == 0:
                value, expr = x // value, f"{x} / {wrapped}"
            else:
                return None
    return value, expr


def countdown_rows(n: int, seed: int, spec: CountdownSpec = CountdownSpec(), *, split: str = "train",
                   exclude: set[str] | frozenset = frozenset()) -> list[dict]:
    """``n`` distinct solvable Countdown rows with a stored ``solution``, deterministic in ``seed``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")

    def make(rng):
        for _ in range(100_000):
            numbers = sorted(rng.randint(1, spec.max_number) for _ in range(spec.n_numbers))
            sol = _random_solution(rng, numbers)
            if sol is None:
                continue
            target, expr = sol
            if spec.min_target <= target <= spec.max_target and target not in numbers:
                break
        else:
            raise ValueError(f"no Countdown instance found for {spec}; widen the number or target range")
        check = safe_arith(expr)  # the stored solution is verified by the same parser the reward uses
        assert check is not None and check.value == Fraction(target), (expr, target)
        return f"{numbers}->{target}", {"numbers": numbers, "target": target, "solution": expr}

    rows = []
    for i, (_, r) in enumerate(_unique_rows(n, seed, make, set(exclude), "countdown")):
        q = countdown_question(r["numbers"], r["target"])
        rows.append({"id": f"countdown-{split}-{i:04d}",
                     "prompt": [{"role": "system", "content": COUNTDOWN_SYSTEM}, {"role": "user", "content": q}],
                     "question": q, **r})
    return rows


# ---------------------------------------------------------------------------------------------
# The task registry
# ---------------------------------------------------------------------------------------------


def _question_key(row: dict) -> str:
    """A row's identity for keeping test questions out of train: its question."""
    return row["question"]


def _countdown_key(row: dict) -> str:
    """A Countdown row's identity: its numbers and target (the same puzzle in other words is the same puzzle)."""
    return f"{row['numbers']}->{row['target']}"


def _question_prompt(task: Task, question: str | None = None, **fields) -> list[dict]:
    """Chat messages for a question string, in the task spec's prompt style."""
    if question is None:
        raise ValueError(f"{task.name} prompts need a question string")
    return make_messages(question, getattr(task.spec, "prompt_style", "plain"))


def _countdown_prompt(task: Task, question: str | None = None, **fields) -> list[dict]:
    """Countdown's system prompt and the puzzle (given as text, or as ``numbers=`` and ``target=``)."""
    if question is None:
        try:
            question = countdown_question(fields["numbers"], fields["target"])
        except KeyError as e:
            raise ValueError("countdown prompts need numbers=... and target=...") from e
    return [{"role": "system", "content": COUNTDOWN_SYSTEM}, {"role": "user", "content": question}]


@dataclass(frozen=True)
class Task:
    """A task: how to make its rows, how to prompt, and how to score.

    ``rows(split)`` regenerates the committed split in memory (identical to ``data/<name>_<split>.jsonl``);
    ``rows(split, data_dir=...)`` reads the JSONL instead.  ``reward_funcs`` / ``reward_weights`` go
    straight to TRL (``GRPOTrainer(reward_funcs=...)``, ``GRPOConfig(reward_weights=...)``) or to
    :func:`grpo_lessons.core.rewards.combine`.
    """

    name: str
    description: str
    make_rows: Callable[..., list[dict]]
    spec: object
    reward_funcs: tuple[Callable, ...]
    reward_weights: tuple[float, ...]
    sizes: dict = field(default_factory=lambda: {"train": 400, "test": 200})
    seed: int = 0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # the trainer's default completion budget for this task
    columns: tuple[str, ...] = ()
    row_key: Callable[[dict], str] = _question_key  # a row's identity: no test row shares one with train
    prompt_fn: Callable[..., list[dict]] = _question_prompt  # (task, question=None, **fields) -> chat messages

    def rows(self, split: str = "train", data_dir: str | os.PathLike | None = None) -> list[dict]:
        """All rows of ``split`` (``"train"`` or ``"test"``); the test split shares no question with train."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known: {list(SPLITS)}")
        if data_dir is not None:
            path = Path(data_dir) / f"{self.name}_{split}.jsonl"
            if not path.is_file():
                raise FileNotFoundError(f"{path} does not exist; write it with `python -m grpo_lessons.training.data --out {data_dir}`")
            return self._validated(read_jsonl(path), str(path))
        train = self.make_rows(self.sizes["train"], self.seed, self.spec, split="train")
        if split == "train":
            return train
        keys = {self._key(r) for r in train}
        return self.make_rows(self.sizes["test"], self.seed + 1, self.spec, split="test", exclude=keys)

    def _validated(self, rows: list[dict], where: str) -> list[dict]:
        """Rows read from a file must be non-empty and carry ``prompt`` plus this task's columns."""
        if not rows:
            raise ValueError(f"{where} has no rows; regenerate it with `python -m grpo_lessons.training.data`")
        for i, row in enumerate(rows, 1):
            missing = [c for c in ("prompt", *self.columns) if not isinstance(row, dict) or c not in row]
            if missing:
                raise ValueError(f"{where}: row {i} lacks column(s) {missing}")
            if not isinstance(row["prompt"], list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                              for m in row["prompt"]):
                raise ValueError(f"{where}: row {i}: prompt must be a list of {{'role', 'content'}} messages")
        return rows

    def _key(self, row: dict) -> str:
        return self.row_key(row)

    def prompt(self, question: str | None = None, **fields) -> list[dict]:
        """Chat messages for a new question, in this task's prompt style.

        ``task.prompt("What is 2 + 3?")`` for arithmetic; ``task.prompt(numbers=[3, 5, 7], target=22)`` for Countdown.
        """
        return self.prompt_fn(self, question, **fields)

    def with_spec(self, **changes) -> "Task":
        """A copy with a different difficulty / prompt style, e.g. ``task.with_spec(ops="+-*")``."""
        return replace(self, spec=replace(self.spec, **changes))


#: The default arithmetic configuration, chosen by probing the base model (data/PROBE.md): with
#: operands 0-20, + and -, "Reply with only the number." and last-number scoring, SmolLM2-135M-Instruct
#: is right 31% of the time greedily and 8% (21% at temperature 0.7) when sampling -- groups of mixed
#: correctness for GRPO, and room to improve.  Two-digit addition (6-10% greedy) leaves most groups
#: all-wrong; one-digit sums have only 155 distinct questions, too few for a held-out split.
DEFAULT_ARITHMETIC = ArithmeticSpec(ops="+-", min_operand=0, max_operand=20, prompt_style="only_number")

TASKS: dict[str, Task] = {
    "arithmetic": Task(
        name="arithmetic",
        description="Two-number arithmetic ('What is 17 - 9?'); reward 1 when the final number is right.",
        make_rows=arithmetic_rows,
        spec=DEFAULT_ARITHMETIC,
        reward_funcs=(arithmetic_reward,),
        reward_weights=(1.0,),
        sizes={"train": 400, "test": 200},
        columns=("answer",),
        max_new_tokens=12,  # "13 - 1 = 12." is 8 tokens; the CPU benchmark's setting
    ),
    "countdown": Task(
        name="countdown",
        description="Countdown: reach the target with + - * / using each given number at most once.",
        make_rows=countdown_rows,
        spec=CountdownSpec(),
        reward_funcs=(countdown_reward, format_reward),
        reward_weights=(1.0, 0.1),
        sizes={"train": 400, "test": 200},
        columns=("numbers", "target"),
        row_key=_countdown_key,
        prompt_fn=_countdown_prompt,
    ),
}


def get_task(name: str) -> Task:
    """The registered task called ``name`` (``"arithmetic"``, ``"countdown"``)."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)} (GSM8K: load_gsm8k())") from None


def load_task(name: str, split: str = "train", data_dir: str | os.PathLike | None = None) -> list[dict]:
    """Rows of a registered task's split (regenerated in memory unless ``data_dir`` is given)."""
    return get_task(name).rows(split, data_dir=data_dir)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _dumps(row: dict) -> str:
    return json.dumps(row, ensure_ascii=True, separators=(", ", ": "))


def write_jsonl(rows: Sequence[dict], path: str | os.PathLike) -> Path:
    """Write rows one JSON object per line (ASCII, ``\\n`` endings), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(_dumps(row) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL file; a bad line raises ``ValueError`` naming the file and line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
    return rows


def write_all(out: str | os.PathLike, tasks: Sequence[str] | None = None) -> list[Path]:
    """Write ``<out>/<task>_<split>.jsonl`` for every registered task (or the named ones)."""
    written = []
    for name in tasks or sorted(TASKS):
        task = get_task(name)
        for split in SPLITS:
            written.append(write_jsonl(task.rows(split), Path(out) / f"{name}_{split}.jsonl"))
    return written


# ---------------------------------------------------------------------------------------------
# GSM8K (needs the Hugging Face hub)
# ---------------------------------------------------------------------------------------------

GSM8K_SUFFIX = " Think step by step, then give the final number in <answer></answer> tags."


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Can a TCP connection to the hub's host be opened within ``timeout`` seconds?"""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def load_gsm8k(split: str = "test", *, limit: int | None = None, system: str = SYSTEM_PROMPT) -> list[dict]:
    """GSM8K (``openai/gsm8k``, config ``main``) as task rows: ``prompt``, ``question``, ``answer`` (the number
    after ``####``, as a string) and ``solution``.  Score with :func:`grpo_lessons.core.rewards.gsm8k_reward`.

    Needs the ``datasets`` package and hub access (or a local ``datasets`` cache); otherwise raises a
    ``RuntimeError`` that says so.  With ``HF_HUB_OFFLINE=1`` it fails at once instead of waiting on the network.
    """
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K has splits 'train' and 'test', got {split!r}")
    try:
        import datasets
    except ImportError:
        raise RuntimeError("load_gsm8k needs the `datasets` package, part of the `train` extra: "
                           "pip install '.[train]' in a checkout of grpo-lessons") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    if not offline and not _hub_reachable():
        # Fail in a few seconds instead of the hub client's ~25 s of retries.
        raise RuntimeError(
            "GSM8K needs the Hugging Face hub, which cannot be reached from here "
            f"({os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}). With a local `datasets` cache of "
            "openai/gsm8k, set HF_HUB_OFFLINE=1; otherwise use the generated tasks, which work offline: "
            "get_task('arithmetic') or get_task('countdown')."
        )
    try:
        ds = datasets.load_dataset("openai/gsm8k", "main", split=split)
    except Exception as e:  # hub unreachable, offline mode, no cache: one clear message instead of a deep traceback
        raise RuntimeError(
            "GSM8K could not be loaded from the Hugging Face hub ("
            + ("HF_HUB_OFFLINE is set" if offline else "no network access or the hub is down")
            + "). It is only needed for the GSM8K task; the generated tasks work offline: "
            "get_task('arithmetic') or get_task('countdown'). "
            f"Cause: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    rows = []
    for i, ex in enumerate(ds):
        if limit is not None and i >= limit:
            break
        answer = ex["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
        rows.append({
            "id": f"gsm8k-{split}-{i:05d}",
            "prompt": [{"role": "system", "content": system},
                       {"role": "user", "content": ex["question"] + GSM8K_SUFFIX}],
            "question": ex["question"],
            "answer": answer,
            "solution": ex["answer"],
        })
    return rows


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m grpo_lessons.training.data --out data [--check]``: write (or verify) the task files."""
    p = argparse.ArgumentParser(prog="python -m grpo_lessons.training.data", description=main.__doc__)
    p.add_argument("--out", default="data", help="directory for <task>_<split>.jsonl (default: data)")
    p.add_argument("--task", action="append", choices=sorted(TASKS), help="only this task (repeatable)")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if the files in --out differ from what would be written")
    args = p.parse_args(argv)
    if args.check:
        bad = []
        for name in args.task or sorted(TASKS):
            for split in SPLITS:
                path = Path(args.out) / f"{name}_{split}.jsonl"
                want = "".join(_dumps(r) + "\n" for r in get_task(name).rows(split)).encode("utf-8")
                if not path.is_file() or path.read_bytes() != want:
                    bad.append(str(path))
        for b in bad:
            print(f"differs or missing: {b}", file=sys.stderr)
        print("ok" if not bad else f"{len(bad)} file(s) out of date; rerun without --check")
        return 1 if bad else 0
    for path in write_all(args.out, args.task):
        print(f"wrote {path} ({sum(1 for _ in open(path, encoding='utf-8'))} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
