"""Our trainer only, fp32 vs the fast settings, alternately in one process (no TRL: a few minutes even on a busy CPU).

A: ``precision="fp32"``, the trained model samples, per-parameter AdamW (the settings before bf16 and fusion);
B: ``precision="bf16-mixed"``, ``sampler_dtype="bfloat16"``, fused AdamW.  SmolLM2-135M-Instruct, arithmetic,
8 prompts x G = 8, 12 new tokens, T = 0.7, beta = 0, 2 threads.  Each step's row (seconds, per-phase times,
mismatch) goes to ``--out``/result.json.  Step 1 of each includes one-off warm-up costs.

    python benchmarks/ours_fp32_vs_bf16.py --steps 3
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from grpo_lessons.training.data import get_task  # noqa: E402
from grpo_lessons.core.rewards import arithmetic_reward  # noqa: E402
from grpo_lessons.training.trainer import TrainConfig, Trainer  # noqa: E402

KEYS = ("seconds", "time_sample", "time_forward", "time_backward", "time_optimizer", "mismatch_k3", "reward_mean")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "trainer_vs_trl" / "ours_fp32_vs_bf16"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = get_task("arithmetic").rows("train")[:400]
    tmp = tempfile.mkdtemp(prefix="ours-ab-")

    def make(name, **kw):
        c = TrainConfig(model="smollm2", steps=10_000, prompts_per_step=8, group_size=8, lr=3e-5, beta=0.0,
                        max_new_tokens=12, temperature=0.7, eval_size=0, out=f"{tmp}/{name}", seed=0,
                        reuse_freed_memory=True, **kw)
        return Trainer(c, train_rows=rows, reward_funcs=[arithmetic_reward])

    runs = {"fp32+adamw": make("a", optimizer="adamw"),
            "bf16-mixed+bf16-sampler+fused": make("b", precision="bf16-mixed", sampler_dtype="bfloat16")}
    out = []
    for i in range(args.steps):
        for name, tr in runs.items():
            r = tr.step()
            d = {k: r[k] for k in KEYS} | {"name": name, "step": i + 1, "load": os.getloadavg()[0]}
            out.append(d)
            print(json.dumps(d), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps({"threads": args.threads, "rows": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
