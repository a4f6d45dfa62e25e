"""The site's ``metrics.csv`` page lists every column the trainer writes, and no column it does not.

The columns are read from the header of a real ``metrics.csv`` (one step of a tiny Qwen2 on two reward functions), so
a column added to the trainer without a line on the page fails here.  A line of the page documents a family of
columns with ``<name>`` in place of a reward function's name (``reward_<name>``).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guides" / "metrics.md"


def documented(text: str) -> list[str]:
    """The column names of the page's tables: the first cell of each row, in backticks."""
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def undocumented(columns: list[str], names: list[str], reward_names: list[str]) -> tuple[list[str], list[str]]:
    """(columns with no line on the page, lines on the page that match no column)."""
    alt = "|".join(map(re.escape, reward_names)) or "(?!)"
    patterns = {n: re.compile("^" + re.escape(n).replace(re.escape("<name>"), f"(?:{alt})") + "$") for n in names}
    missing = [c for c in columns if not any(p.match(c) for p in patterns.values())]
    stale = [n for n, p in patterns.items() if not any(p.match(c) for c in columns)]
    return missing, stale


def test_the_checker_sees_a_missing_and_a_stale_line():
    page = "| `step` | count |\n| `reward_<name>` | reward |\n| `gone` | x |\n"
    assert documented(page) == ["step", "reward_<name>", "gone"]
    assert undocumented(["step", "reward_a", "reward_b", "new_col"], documented(page), ["a", "b"]) == (
        ["new_col"], ["gone"])


def test_every_column_the_trainer_writes_is_on_the_metrics_page(tmp_path):
    pytest.importorskip("transformers")
    from grpo_lessons.core.rewards import completion_text
    from grpo_lessons.training.trainer import TrainConfig, train

    def digits(completions, **kw):
        return [sum(ch.isdigit() for ch in completion_text(c)) / max(1, len(completion_text(c))) for c in completions]

    def brevity(completions, **kw):
        return [1.0 / (1 + len(completion_text(c))) for c in completions]

    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b}
            for a in range(3) for b in range(2)]
    cfg = TrainConfig(model="tiny-qwen2", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_size=2,
                      out=str(tmp_path / "run"), seed=0, micro_batch_size=4)
    res = train(cfg, progress=False, train_rows=rows, eval_rows=rows[:2], reward_funcs=[digits, brevity])
    with open(res.csv_path, newline="") as f:
        columns = next(csv.reader(f))
    assert {"reward_digits", "reward_brevity", "grad_norm", "completion_len"} <= set(columns), columns
    missing, stale = undocumented(columns, documented(PAGE.read_text(encoding="utf-8")), ["digits", "brevity"])
    assert not missing, f"metrics.csv columns with no line on {PAGE.name}: {missing}"
    assert not stale, f"{PAGE.name} documents columns the trainer does not write: {stale}"


# where the course tells a learner that a zero loss is fine: each place must also give the exception (a batch of
# dead groups has a zero gradient) and the columns that show it
ZERO_LOSS_TEXTS = ("README.md", "docs/guides/troubleshooting.md", "notebooks/05_grpo_end_to_end.ipynb",
                   "notebooks/19_trl_qwen.ipynb")
NOT_ZERO = re.compile(r"gradient (is )?\**not\** zero|\*\*gradient is not\*\*", re.I)


def _units(path: Path) -> list[str]:
    """A notebook's markdown cells, or a page's paragraphs and bullets."""
    if path.suffix == ".ipynb":
        import json

        return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
    return re.split(r"\n(?=\* )|\n\n", path.read_text(encoding="utf-8"))


def test_a_zero_loss_comes_with_its_exception_and_the_columns_to_read():
    from grpo_lessons.training.records import BASE_COLUMNS

    for name in ZERO_LOSS_TEXTS:
        units = [u for u in _units(ROOT / name) if NOT_ZERO.search(u)]
        assert units, f"{name}: no sentence on the gradient of a zero loss"
        for u in units:
            assert re.search(r"equal rewards|rewards are equal|rewards differ|all wrong|dead", u), (
                f"{name}: says the gradient is not zero without the dead-group exception: {u[-300:]!r}")
        assert any(re.search(r"frac_zero_std_groups|frac_reward_zero_std", u) and "grad_norm" in u
                   for u in _units(ROOT / name)), f"{name}: does not say which columns show a dead run"
    assert {"frac_zero_std_groups", "grad_norm", "adv_rms"} <= set(BASE_COLUMNS)
    bullet = next(u for u in _units(ROOT / "docs/guides/troubleshooting.md") if u.startswith("* **Loss is 0"))
    # both aggregations: the per-sequence loss (exactly 0) and TRL's default per-token `dapo` one
    assert "`grpo`" in bullet and "`dapo`" in bullet and "Σᵢ|oᵢ|Aᵢ / Σᵢ|oᵢ|" in bullet, bullet


def test_completion_length_has_one_definition():
    """The metrics page defines completion length, its final value and the greedy length; the studies' tables, the
    curves and notebook 06 use those words for those quantities."""
    from grpo_lessons.training.plots import CURVE_TITLES

    page = PAGE.read_text(encoding="utf-8")
    section = page.split("## Completion length", 1)[1].split("\n## ", 1)[0]
    for words in ("`completion_len`", "last five training steps", "`completion_len_last5`", "`eval_completion_len`"):
        assert words in section, words
    for result in sorted((ROOT / "benchmarks" / "results").glob("*/RESULT.md")):
        text = result.read_text(encoding="utf-8")
        if "final length" in text:  # a study's table of runs: its footer says which length it is
            assert re.search(r"Final length: the final completion length, the mean number of tokens of the completions "
                             r"sampled for training \(`completion_len`\) over the last five training steps", text), result
    assert "greedy" in CURVE_TITLES["eval_completion_len"] and "greedy" not in CURVE_TITLES["completion_len"]
    nb06 = (ROOT / "notebooks" / "06_dr_grpo.ipynb").read_text(encoding="utf-8")
    assert "metrics.md#completion-length" in nb06 and "final completion length" in nb06
