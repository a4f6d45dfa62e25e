"""Getting a reward signal: from all-zero groups to a gradient, on SmolLM2-135M-Instruct with an ``<answer>`` reward.

The same arithmetic questions (``get_task("arithmetic")``'s held-out split: sums and differences of numbers from 0
to 20), sampled at temperature 1 with the same seeds in every arm (a paired design), scored by a strict tag reward
(:func:`tag_reward`: 1 when the completion holds exactly one ``<answer>N</answer>`` and ``N`` is the right number,
else 0).  The arms change one thing at a time:

* ``a_question``: the question alone (the system prompt "You are a helpful assistant.");
* ``b_instruction``: + " Put the final answer in <answer></answer> tags." (the package's ``answer_tag`` style);
* ``c_one_shot``: + one worked example before the question (a user turn and the assistant's ``<answer>7</answer>``);
* ``d_one_shot_G16``: ``c``'s prompt with ``G = 16`` completions per question instead of 8 (``c`` is the first 8 of
  each of ``d``'s groups: the same draw);
* ``e_partial_credit``: ``c``'s completions (the same ones) scored by :func:`partial_credit_reward`
  (0.2 for a well-formed tag holding a number, + 0.8 when the number is right);
* ``f_easier``: ``c``'s prompt on easier questions (one-digit sums and differences, ``ARITHMETIC_LEVELS["1digit"]``).

For each arm and seed: the share of groups whose rewards are all equal (no gradient), the mean reward, the share of
completions with a well-formed tag, and the norm of the gradient of GRPO's loss (``policy_loss(variant="grpo")`` on
``group_advantages``, on policy, beta = 0) at step 0 on exactly those completions -- 0 exactly when every group is
dead.  Next to the measured share: ``p**G + (1-p)**G`` from the arm's measured pass rate ``p``.

    HF_HUB_OFFLINE=1 python benchmarks/reward_signal.py                  # the committed run (minutes on 2 cores)
    HF_HUB_OFFLINE=1 python benchmarks/reward_signal.py --quick --out /tmp/rs   # tiny-qwen2, seconds (a test runs it)

Writes ``results.json`` (every group's rewards, per arm and seed), ``RESULT.md`` and ``reward_signal.png`` to
``--out`` (default ``benchmarks/results/reward_signal/``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402
from grpo_lessons import group_advantages, policy_loss, zero_gradient_probability  # noqa: E402
from grpo_lessons.core.rewards import completion_text, parse_number  # noqa: E402
from grpo_lessons.training.rollout import rollout_logps  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "reward_signal"
SYSTEM = "You are a helpful assistant."
INSTRUCTION = " Put the final answer in <answer></answer> tags."
EXAMPLE = ("What is 3 + 4?", "<answer>7</answer>")  # the one-shot turn (a question in neither arm's question set)
OPEN, CLOSE = "<answer>", "</answer>"
MAX_TEXT = 20_000  # longer completions are not read (no answer)

#: arm -> prompt style, group size G, reward, question set.  Arms with the same style and questions share one draw:
#: ``c`` is the first 8 completions of each of ``d``'s groups of 16 (so ``d`` adds 8 more to the same 8), and ``e``
#: re-scores ``c``'s completions.
ARMS: dict[str, dict] = {
    "a_question": dict(style="question", G=8, reward="strict", questions="default"),
    "b_instruction": dict(style="instruction", G=8, reward="strict", questions="default"),
    "c_one_shot": dict(style="one_shot", G=8, reward="strict", questions="default"),
    "d_one_shot_G16": dict(style="one_shot", G=16, reward="strict", questions="default"),
    "e_partial_credit": dict(style="one_shot", G=8, reward="partial", questions="default"),
    "f_easier": dict(style="one_shot", G=8, reward="strict", questions="easier"),
}


# ---------------------------------------------------------------------------------------------
# Rewards: bounded, exact parsing; never eval; a malformed answer is no answer (0), never a wrong number
# ---------------------------------------------------------------------------------------------

def tag_answer(text) -> Fraction | None:
    """The number inside the completion's single ``<answer>...</answer>``, or ``None``.

    ``None`` unless the text (at most 20 000 characters) has exactly one opening and one closing tag, in that order,
    around content that is one number read exactly by :func:`grpo_lessons.core.rewards.parse_number` (``"12"``,
    ``"-3"``, ``"7/2"``; not ``"2 + 3 = 5"``, not a 41-digit number, not text).
    """
    text = completion_text(text)
    if len(text) > MAX_TEXT or text.count(OPEN) != 1 or text.count(CLOSE) != 1:
        return None
    start, end = text.index(OPEN) + len(OPEN), text.index(CLOSE)
    if end < start:
        return None
    return parse_number(text[start:end].strip())


def tag_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion's single ``<answer>N</answer>`` holds the right number ``N``, else 0.0 (TRL's signature)."""
    out = []
    for c, gold in zip(completions, answer):
        pred, gold = tag_answer(c), parse_number(gold)
        out.append(1.0 if pred is not None and gold is not None and pred == gold else 0.0)
    return out


def partial_credit_reward(completions, answer, **kwargs) -> list[float]:
    """0.2 for a well-formed ``<answer>N</answer>`` (one tag pair, one number), + 0.8 when ``N`` is right; else 0."""
    strict = tag_reward(completions, answer)
    return [0.2 * (tag_answer(c) is not None) + 0.8 * s for c, s in zip(completions, strict)]


REWARDS = {"strict": tag_reward, "partial": partial_credit_reward}


def messages(question: str, style: str) -> list[dict]:
    """The chat prompt of an arm: the question alone, with the tag instruction, or with a one-shot example first."""
    if style == "question":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    if style == "instruction":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question + INSTRUCTION}]
    if style == "one_shot":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": EXAMPLE[0] + INSTRUCTION},
                {"role": "assistant", "content": EXAMPLE[1]}, {"role": "user", "content": question + INSTRUCTION}]
    raise ValueError(f"unknown prompt style {style!r}")


def question_sets(n: int) -> dict[str, list[dict]]:
    """``n`` held-out questions of the default arithmetic task, and ``n`` easier ones (one-digit operands)."""
    from grpo_lessons.training.data import ARITHMETIC_LEVELS, arithmetic_rows, get_task

    task = get_task("arithmetic")
    easy = arithmetic_rows(n, 1, ARITHMETIC_LEVELS["1digit"], split="test")  # 155 distinct questions: drawn directly
    pick = lambda rows: [{"question": r["question"], "answer": r["answer"]} for r in rows[:n]]  # noqa: E731
    return {"default": pick(task.rows("test")), "easier": pick(easy)}


# ---------------------------------------------------------------------------------------------
# GRPO's gradient at step 0
# ---------------------------------------------------------------------------------------------

def first_of_each_group(rollout, k: int):
    """The rollout cut to the first ``k`` completions of each group: a draw of ``G = k`` from the same samples."""
    G = rollout.group_size
    if k == G:
        return rollout
    idx = torch.tensor([g * G + j for g in range(rollout.num_prompts) for j in range(k)])
    return replace(rollout, prompt_ids=rollout.prompt_ids[idx], prompt_mask=rollout.prompt_mask[idx],
                   completion_ids=rollout.completion_ids[idx], completion_mask=rollout.completion_mask[idx],
                   is_eos=rollout.is_eos[idx], texts=[rollout.texts[i] for i in idx.tolist()], group_size=k,
                   logps=None, sampling_logps=None, sampling_entropy=None, sampler_topk_ids=None, sampler_topk_logps=None)


def step0_grad_norm(model, rollout, rewards, *, temperature: float = 1.0, chunk_groups: int = 4,
                    skip_dead: bool = False) -> tuple[float, int]:
    """L2 norm of the gradient of GRPO's loss (per-sequence mean, on policy, beta = 0) on a rollout's completions.

    ``rewards``: ``(N,)``, groups contiguous.  The loss is accumulated over chunks of whole groups, each weighted by
    its share of the ``N`` sequences, so the gradient is that of the full batch's ``policy_loss``.  With
    ``skip_dead`` a chunk whose advantages are all exactly 0 is not run backward (its gradient is 0 times a finite
    number: exactly 0); returns ``(norm, groups skipped)``.
    """
    G, N = rollout.group_size, len(rollout)
    adv = group_advantages(torch.as_tensor(rewards, dtype=torch.float32), G)  # (N,) 0 for an all-equal group
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    skipped = 0
    for s in range(0, N, chunk_groups * G):
        rows = slice(s, min(N, s + chunk_groups * G))
        if skip_dead and bool((adv[rows] == 0).all()):
            skipped += (rows.stop - rows.start) // G
            continue
        logp = rollout_logps(model, rollout, temperature, rows=rows)  # (b, T), with gradient
        out = policy_loss(logp, logp.detach(), adv[rows], rollout.completion_mask[rows].float(), variant="grpo")
        (out.loss * ((rows.stop - rows.start) / N)).backward()
    sq = sum(float(p.grad.double().pow(2).sum()) for p in params if p.grad is not None)
    model.zero_grad(set_to_none=True)
    return math.sqrt(sq), skipped


def arm_stats(group_rewards: list[list[float]], tags: list[bool], binary: bool) -> dict:
    """Shares and rates of one arm and seed from its per-group rewards."""
    flat = [r for g in group_rewards for r in g]
    G = len(group_rewards[0])
    dead = sum(1 for g in group_rewards if max(g) == min(g))
    p = sum(1 for r in flat if r == 1.0) / len(flat)  # pass rate: right number in the tag
    return {"groups": len(group_rewards), "G": G, "all_equal_groups": dead, "all_equal_share": dead / len(group_rewards),
            "mean_reward": sum(flat) / len(flat), "pass_rate": p, "tag_rate": sum(tags) / len(tags),
            "predicted_all_equal": zero_gradient_probability(p, G) if binary else None}


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

def run(args) -> dict:
    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.training.rollout import generate_completions

    info = machine()
    t_start = time.perf_counter()
    model_name = "tiny-qwen2" if args.quick else "smollm2"
    model, tok = resolve_model(model_name)
    model.eval()  # no dropout: the gradient is a function of the completions alone
    qsets = question_sets(args.prompts)
    res = {"config": {k: v for k, v in vars(args).items() if k != "out"}, "model": model_name, "machine": info,
           "arms": {a: dict(ARMS[a]) for a in args.arms}, "questions": qsets, "example_turn": list(EXAMPLE),
           "instruction": INSTRUCTION, "runs": {a: {} for a in args.arms}, "timing_s": {}}
    rollouts = {}
    for seed in args.seeds:
        for arm in args.arms:
            spec = ARMS[arm]
            t0 = time.perf_counter()
            qs = qsets[spec["questions"]]
            G = spec["G"] if not args.quick else spec["G"] // 2  # quick: 4 and 8
            key = (spec["style"], spec["questions"])
            if key not in rollouts:
                # one draw per prompt style and question set, of the largest G any arm asks of it; the same seed
                # in every arm, so that draws differ only through what the arm changes
                G_draw = max(a["G"] for n, a in ARMS.items() if n in args.arms and (a["style"], a["questions"]) == key)
                G_draw = G_draw if not args.quick else G_draw // 2
                rollouts[key] = generate_completions(
                    model, tok, [messages(q["question"], spec["style"]) for q in qs], G_draw,
                    max_new_tokens=args.max_new_tokens, temperature=args.temperature, compute_logps=False,
                    generator_seed=seed)
            ro = first_of_each_group(rollouts[key], G)
            texts = ro.texts
            answers = [q["answer"] for q in qs for _ in range(ro.group_size)]
            rewards = REWARDS[spec["reward"]](texts, answers)
            # every backward pass is run on the first seed; later seeds skip chunks of dead groups (exactly 0)
            grad, skipped = step0_grad_norm(model, ro, rewards, temperature=args.temperature,
                                            skip_dead=seed != args.seeds[0])
            Gr = ro.group_size
            groups = [rewards[i:i + Gr] for i in range(0, len(rewards), Gr)]
            tags = [tag_answer(t) is not None for t in texts]
            stats = arm_stats(groups, tags, binary=spec["reward"] == "strict")
            stats.update(grad_norm=grad, backward_skipped_groups=skipped, group_rewards=groups, mean_tokens=float(ro.lengths.float().mean()),
                         truncated_share=float(ro.truncated.float().mean()), examples=texts[:: max(1, Gr * 4)][:4],
                         seconds=round(time.perf_counter() - t0, 1))
            res["runs"][arm][f"seed{seed}"] = stats
            print(f"seed {seed} {arm:>17}: dead {stats['all_equal_share']:.3f} mean r {stats['mean_reward']:.3f} "
                  f"tag {stats['tag_rate']:.3f} grad {grad:.4g} ({stats['seconds']} s)", flush=True)
        rollouts.clear()
    res["timing_s"]["total"] = round(time.perf_counter() - t_start, 1)
    res["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    res["summary"] = summarise(res)
    return res


def _mean_range(xs):
    xs = [x for x in xs if x is not None]
    return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs)} if xs else None


def summarise(res: dict) -> dict:
    keys = ("all_equal_share", "predicted_all_equal", "mean_reward", "pass_rate", "tag_rate", "grad_norm",
            "mean_tokens", "truncated_share")
    out = {}
    for arm, seeds in res["runs"].items():
        out[arm] = {k: _mean_range([s[k] for s in seeds.values()]) for k in keys}
        dead = _mean_range([s["all_equal_share"] for s in seeds.values()])
        out[arm]["groups_per_informative_group"] = (None if dead is None or dead["mean"] >= 1
                                                    else 1.0 / (1.0 - dead["mean"]))
    return out


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def _f(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def _mr(d, spec=".3f"):
    if d is None:
        return "-"
    if len(set(round(v, 6) for v in (d["min"], d["max"]))) == 1:
        return _f(d["mean"], spec)
    return f"{_f(d['mean'], spec)} ({_f(d['min'], spec)}–{_f(d['max'], spec)})"


def write(out: Path, res: dict) -> None:
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    summ, arms = res["summary"], list(res["summary"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(7.8, 3.4))
    x = range(len(arms))
    for ax, key, label in ((ax1, "all_equal_share", "groups with all-equal rewards"), (ax2, "grad_norm", "‖∇ loss‖ at step 0")):
        m = [summ[a][key]["mean"] for a in arms]
        lo = [summ[a][key]["mean"] - summ[a][key]["min"] for a in arms]
        hi = [summ[a][key]["max"] - summ[a][key]["mean"] for a in arms]
        ax.bar(x, m, yerr=[lo, hi], color="#5c6bc0", capsize=3, label="measured (mean, min–max over seeds)")
        if key == "all_equal_share":
            pred = [(i, summ[a]["predicted_all_equal"]["mean"]) for i, a in enumerate(arms) if summ[a]["predicted_all_equal"]]
            ax.scatter([i for i, _ in pred], [p for _, p in pred], color="#e65100", marker="D", zorder=3,
                       label="p^G + (1-p)^G")
            ax.set_ylim(0, 1.4)  # room above the bars for the legend
            ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
            ax.legend(fontsize=8, loc="upper center")
        ax.set_xticks(list(x), [a.split("_", 1)[0] for a in arms])
        ax.set_title(label, fontsize=10)
        ax.tick_params(labelsize=9)
    fig.suptitle(f"{res['model']}: reward signal by arm ({len(res['config']['seeds'])} seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "reward_signal.png", dpi=100)
    plt.close(fig)

    c, m = res["config"], res["machine"]
    minutes = res["timing_s"]["total"] / 60
    lines = ["# Getting a reward signal (`benchmarks/reward_signal.py`)", "",
             f"Model {res['model']} (CPU, float32). {c['prompts']} held-out arithmetic questions per arm, sampled at "
             f"temperature {c['temperature']} with at most {c['max_new_tokens']} new tokens, seeds {c['seeds']} (the same "
             "seeds in every arm). Reward: 1 when the completion holds exactly one `<answer>N</answer>` with the right "
             "`N`, else 0 (arm e: 0.2 for a well-formed tag + 0.8 when right). Gradient: GRPO's loss (per-sequence mean, "
             "on policy, β = 0) at step 0 on the arm's own completions, L2 norm over all parameters; on the first seed every "
             "group is run backward, on later seeds chunks of groups whose advantages are all 0 are skipped (their "
             "gradient is exactly 0). Arm c is the first 8 completions of each of arm d's groups of 16 (one draw), "
             "and arm e re-scores arm c's completions.", "",
             "| arm | G | all-equal groups | p^G + (1-p)^G | mean reward | pass rate p | tag rate | grad norm | mean tokens |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        s, G = summ[arm], next(iter(res["runs"][arm].values()))["G"]
        lines.append(f"| {arm} | {G} | {_mr(s['all_equal_share'])} | {_mr(s['predicted_all_equal'])} | "
                     f"{_mr(s['mean_reward'])} | {_mr(s['pass_rate'])} | {_mr(s['tag_rate'])} | "
                     f"{_mr(s['grad_norm'], '.3g')} | {_mr(s['mean_tokens'], '.1f')} |")
    lines += ["", "Mean over seeds, (min–max) where the seeds differ. *all-equal groups*: the share of questions whose "
              "G rewards are all equal, so every advantage is 0 and the group gives no gradient. *p^G + (1-p)^G*: the "
              "share expected if every question had the arm's pooled pass rate p (questions that differ in difficulty "
              "push the measured share above it; with 16 groups a seed, the two differ by sampling noise too).", "",
              "Per seed (all-equal share / grad norm): " + "; ".join(
                  f"{arm}: " + ", ".join(f"{k} {v['all_equal_share']:.3f} / {v['grad_norm']:.3g}"
                                         for k, v in res["runs"][arm].items()) for arm in arms), "",
              f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, no GPU, {m['torch_threads']} torch thread(s); "
              f"started {m['date']}; load average at start {m['load_average_at_start']}, at end "
              f"{m.get('load_average_at_end')} (no other job running). Wall time {minutes:.1f} min.", "",
              "Files: `results.json` (every group's rewards and a few completions per arm and seed), `reward_signal.png`.", ""]
    (out / "RESULT.md").write_text("\n".join(lines))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--quick", action="store_true", help="tiny-qwen2, 4 questions, G <= 4, short outputs (seconds)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.seeds = 4, 8, [0, 1]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    res = run(args)
    write(Path(args.out), res)
    for arm, s in res["summary"].items():
        print(arm, {k: (round(v["mean"], 4) if isinstance(v, dict) else v) for k, v in s.items()})
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only
    raise SystemExit(main())
