"""Train/inference mismatch, measured: SmolLM2-135M-Instruct sampled in bfloat16, scored in float32.

An RL trainer samples with a fast engine (vLLM, bf16 kernels) and computes the importance ratio with
its own forward pass.  The two give the same tokens different probabilities.  This script measures the
gap on the offline SmolLM2-135M-Instruct, on this CPU, with nothing but a dtype between the two:

* ``mu``      -- a bfloat16 copy of the weights samples ``G`` completions per prompt at ``T = 0.7``;
                 its per-token log-probs of the sampled tokens come from a teacher-forced re-scoring
                 pass of the same bf16 model (:func:`grpo_lessons.training.rollout.rollout_logps`), not from the
                 sampling loop's own logits (a real engine would report those; the re-scoring pass
                 differs from them only by kernel/batch-shape rounding).
* ``pi_old``  -- the float32 model re-scores the same tokens (what the trainer computes).

Two settings: the short arithmetic task (12 new tokens, "Reply with only the number.", 32 prompts x 4)
and a long one (the same questions with "Explain your reasoning step by step in detail, in at least five sentences, then
give the final answer.", 128 new tokens, 16 prompts x 4).  Reported per setting: mean
``|log pi_old - log mu|`` per token, mean k3, the
percentiles of the sequence ratio ``prod_t pi_old/mu`` and of the token ratio, and the share of tokens
or sequences each TRL correction mode truncates or masks (cap 3; masks also with the band [0.5, 2]).
For the short setting it also stores the sampler's top-K log-probs and the trainer's log-probs at the
same ids (``topk.npz``), from which the top-K divergences of DPPO (notebook 13) are computed.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python benchmarks/offpolicy_mismatch.py          # committed run
    HF_HUB_OFFLINE=1 python benchmarks/offpolicy_mismatch.py --prompts 2 --group-size 2 --out /tmp/mm

Writes to ``--out`` (default ``benchmarks/results/offpolicy_mismatch/``): ``tokens.csv`` (one row per
completion token: setting, sequence, position, log mu, log pi_old), ``summary.json`` (the numbers, the
configuration, the machine and its load), ``topk.npz`` and ``mismatch.png``.
Read by ``notebooks/11_train_inference_mismatch.ipynb`` and ``13_dppo.ipynb``.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import cpu_name  # noqa: E402

from grpo_lessons.training.data import get_task, make_messages  # noqa: E402
from grpo_lessons.training.models import resolve_model  # noqa: E402
from grpo_lessons.training.rollout import generate_completions, rollout_logps  # noqa: E402

SETTINGS = {
    "short": {"style": "only_number", "suffix": "", "max_new_tokens": 12},
    # "think_answer" gets ~23-token replies from this model; asking for an explanation gets long ones
    "long": {"style": "plain",
             "suffix": " Explain your reasoning step by step in detail, in at least five sentences, then give the "
                       "final answer.",
             "max_new_tokens": 128},
}
CAP = 3.0
MASK_BAND = (0.5, 2.0)


def machine() -> dict:
    cpu = cpu_name()
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform(), "torch": torch.__version__,
            "load_average_at_start": list(os.getloadavg())}


def percentiles(x: np.ndarray) -> dict:
    q = np.percentile(x, [5, 50, 95])
    return {"min": float(x.min()), "p5": float(q[0]), "p50": float(q[1]), "p95": float(q[2]), "max": float(x.max())}


def correction_shares(log_d: torch.Tensor, mask: torch.Tensor) -> dict:
    """Share of tokens (token modes) or sequences (sequence modes) that each TRL mode changes.

    ``log_d = (log pi_old - log mu) * mask``, ``(B, T)``.  Counted from the ratio (the definition of
    "truncated" / "masked"); notebook 11 recomputes them with :func:`grpo_lessons.core.correction.rollout_weights`.
    """
    m = mask.bool()
    tok = log_d.exp()[m]  # (n_tokens,)
    seq = log_d.sum(-1).exp()  # (B,)
    lo, hi = MASK_BAND
    return {
        "token_truncate_cap3": float((tok > CAP).float().mean()),
        "token_mask_cap3": float((tok > CAP).float().mean()),
        "token_mask_0.5_2": float(((tok < lo) | (tok > hi)).float().mean()),
        "sequence_truncate_cap3": float((seq > CAP).float().mean()),
        "sequence_mask_cap3": float((seq > CAP).float().mean()),
        "sequence_mask_0.5_2": float(((seq < lo) | (seq > hi)).float().mean()),
    }


@torch.no_grad()
def topk_of(model, ro, temperature: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` ids and log-probs (at ``temperature``) of ``model`` at every completion position, ``(B, T, k)``."""
    ids = ro.input_ids
    am = ro.attention_mask
    T = ro.completion_ids.shape[1]
    pos = (am.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False,
                   logits_to_keep=T + 1).logits[:, :-1].float() / temperature  # (B, T, V)
    logp = torch.log_softmax(logits, -1)  # (B, T, V)
    top = logp.topk(k, dim=-1)
    return top.indices, top.values


@torch.no_grad()
def logp_at(model, ro, temperature: float, ids: torch.Tensor) -> torch.Tensor:
    """Log-probs of ``model`` at the given vocabulary ids, ``(B, T, k)``."""
    am = ro.attention_mask
    T = ro.completion_ids.shape[1]
    pos = (am.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ro.input_ids, attention_mask=am, position_ids=pos, use_cache=False,
                   logits_to_keep=T + 1).logits[:, :-1].float() / temperature  # (B, T, V)
    return torch.log_softmax(logits, -1).gather(-1, ids)  # (B, T, k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "offpolicy_mismatch"))
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--long-prompts", type=int, default=16, help="prompts of the 128-token setting (CPU time)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--settings", default="short,long")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    info = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    t0 = time.time()
    fp32, tok = resolve_model("smollm2", dtype=torch.float32)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)  # the "sampler": the same weights rounded to bf16
    fp32.eval()
    bf16.eval()
    info["load_seconds"] = round(time.time() - t0, 1)
    task = get_task("arithmetic")
    rows = task.rows("train")[: a.prompts]
    summary: dict = {"config": vars(a), "model": "SmolLM2-135M-Instruct (offline GGUF, dequantized)",
                     "mu": "bf16 copy of the weights, teacher-forced re-scoring of its own samples",
                     "pi_old": "float32 model, same tokens", "settings": {}}
    token_rows = []
    for name in a.settings.split(","):
        s = SETTINGS[name]
        n_prompts = a.prompts if name == "short" else a.long_prompts
        prompts = [make_messages(r["question"] + s["suffix"], s["style"]) for r in rows[:n_prompts]]
        t1 = time.time()
        ro = generate_completions(bf16, tok, prompts, a.group_size, max_new_tokens=s["max_new_tokens"],
                                  temperature=a.temperature, generator_seed=a.seed, batch_size=8,
                                  compute_logps=False)
        t_gen = time.time() - t1
        mask = ro.completion_mask.float()  # (B, T)
        rows_per = 8 * a.group_size
        with torch.no_grad():
            mu = torch.cat([rollout_logps(bf16, ro, a.temperature, rows=slice(i, i + rows_per))
                            for i in range(0, len(ro), rows_per)]) * mask  # (B, T)
            old = torch.cat([rollout_logps(fp32, ro, a.temperature, rows=slice(i, i + rows_per))
                             for i in range(0, len(ro), rows_per)]) * mask  # (B, T)
        t_all = time.time() - t1
        d = (old - mu) * mask  # (B, T): log pi_old - log mu
        m = mask.bool()
        tokd = d[m].numpy()
        # k3 of KL(mu || pi_old) with x ~ mu: r = pi_old / mu, k3 = (r - 1) - log r
        r = d.exp()
        k3 = ((r - 1) - d)[m]
        seq_log = d.sum(-1)  # (B,)
        lengths = mask.sum(-1)
        res = {
            "prompt_style": s["style"], "prompt_suffix": s["suffix"], "max_new_tokens": s["max_new_tokens"],
            "sequences": len(ro),
            "tokens": int(m.sum()), "mean_length": float(lengths.mean()),
            "truncated_share": float(ro.truncated.float().mean()),
            "mean_abs_log_ratio": float(np.abs(tokd).mean()),
            "mean_log_ratio": float(tokd.mean()),
            "max_abs_log_ratio": float(np.abs(tokd).max()),
            "mean_k3": float(k3.mean()),
            "token_ratio": percentiles(np.exp(tokd)),
            "sequence_ratio": percentiles(seq_log.exp().numpy()),
            "sequence_log_ratio_std": float(seq_log.std()),
            "sequence_ratio_full_length": (percentiles(seq_log[lengths == s["max_new_tokens"]].exp().numpy())
                                           if bool((lengths == s["max_new_tokens"]).any()) else None),
            "full_length_sequences": int((lengths == s["max_new_tokens"]).sum()),
            "shares": correction_shares(d, mask),
            "seconds_generate": round(t_gen, 1), "seconds_total": round(t_all, 1),
            "example_completion": ro.texts[0],
        }
        summary["settings"][name] = res
        for i in range(len(ro)):
            for t in range(int(lengths[i])):
                token_rows.append((name, i, t, round(float(mu[i, t]), 7), round(float(old[i, t]), 7)))
        print(f"[{name}] {len(ro)} seqs, mean len {res['mean_length']:.1f}, mean|d| {res['mean_abs_log_ratio']:.2e}, "
              f"seq ratio p5/p50/p95 {res['sequence_ratio']['p5']:.3f}/{res['sequence_ratio']['p50']:.3f}/"
              f"{res['sequence_ratio']['p95']:.3f}, {t_all:.0f} s", flush=True)
        if name == "short":
            ids, mu_top = topk_of(bf16, ro, a.temperature, a.topk)  # (B, T, K): the sampler's top-K
            old_top = logp_at(fp32, ro, a.temperature, ids)  # (B, T, K): the trainer at the same ids
            np.savez_compressed(out / "topk.npz", topk_ids=ids.numpy().astype(np.int32),
                                sampler_topk_logp=mu_top.numpy().astype(np.float32),
                                trainer_topk_logp=old_top.numpy().astype(np.float32),
                                sampled_ids=ro.completion_ids.numpy().astype(np.int32),
                                sampler_logp=mu.numpy().astype(np.float32),
                                trainer_logp=old.numpy().astype(np.float32),
                                mask=mask.numpy().astype(np.int8), temperature=np.float32(a.temperature))
    info["wall_seconds"] = round(time.time() - t0, 1)
    info["load_average_at_end"] = list(os.getloadavg())
    summary["run"] = info
    summary["note"] = a.note
    with open(out / "tokens.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "seq", "t", "logp_mu", "logp_old"])
        w.writerows(token_rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    try:
        from grpo_lessons.course.viz.offpolicy import plot_measured_mismatch

        fig = plot_measured_mismatch(out / "tokens.csv")
        fig.savefig(out / "mismatch.png", dpi=110, bbox_inches="tight")
    except ImportError as err:  # the plotting module is optional for the measurement itself
        print(f"no figure: {err}")
    print(json.dumps({k: {kk: v[kk] for kk in ("mean_abs_log_ratio", "mean_k3", "sequence_ratio", "shares")}
                      for k, v in summary["settings"].items()}, indent=1))
    print(f"wall {info['wall_seconds']} s, load {info['machine']['load_average_at_start']} -> "
          f"{info['load_average_at_end']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
