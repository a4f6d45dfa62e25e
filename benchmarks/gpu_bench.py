"""GRPO throughput on one GPU with TRL 1.16: step time, completion tokens/s, peak GPU memory, grpo vs dapo.

    python benchmarks/gpu_bench.py            # GPU: fits a 10-minute window (see --budget-s)
    python benchmarks/gpu_bench.py --tiny     # CPU smoke test of the same code, < 1 minute

What it runs, best first:

* ``real+vllm`` — a CUDA GPU, the weights of ``--model`` (default ``Qwen/Qwen2.5-0.5B-Instruct``,
  a hub name or a local directory) and vLLM importable: TRL generates with vLLM in colocate mode.
* ``real`` — weights but no vLLM: TRL generates with ``transformers``.
* ``shaped`` — a GPU but no weights (no hub): a randomly initialised ``Qwen2ForCausalLM`` with
  Qwen2.5-0.5B's dimensions (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
  vocabulary 151936, tied embeddings: 494M parameters).  The tokenizer is the project's small
  local one (512 tokens) for the prompts; the model keeps the full 151936-token vocabulary, so
  the LM head and logits cost what they cost in the real model (ids beyond 512 decode to empty
  text, which only the reward sees).  A random model almost never samples EOS, so every
  completion has exactly ``--max-completion-length`` tokens: a worst case for time and memory.
* ``tiny`` — ``--tiny``: the tiny Qwen2 of ``grpo_lessons.training.models`` on the CPU.

Each GPU variant runs in its own process (clean peak-memory counter; vLLM is started once per
process), reports the median step time after one warm-up step, completion tokens per second over
the timed steps, and ``torch.cuda.max_memory_allocated`` (vLLM's KV-cache pool included when
colocated).  Results go to ``--out`` as JSON and a Markdown table is printed.

Offline GPU machine (no PyPI, no hub)?  Carry the wheels and the weights over:

    # on a machine with PyPI access
    pip download trl==1.16.0 --no-deps -d wheels/          # TRL itself is pure Python: one wheel
    pip wheel . --no-deps -w wheels/                        # grpo_lessons
    # and, if the GPU machine lacks them, the other pins built for its platform:
    pip download torch==2.13.0 transformers==5.17.0 vllm==0.31.0 accelerate datasets \
        --platform manylinux_2_28_x86_64 --python-version 3.11 --only-binary=:all: -d wheels/
    # on the GPU machine
    pip install --no-index --find-links wheels/ --no-deps trl==1.16.0 grpo-lessons
    # weights: copy a downloaded snapshot directory (huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct)
    python benchmarks/gpu_bench.py --model /path/to/Qwen2.5-0.5B-Instruct

"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QWEN25_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                  rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)


def prompts_dataset(n: int = 256, seed: int = 0):
    """Arithmetic word problems with answers: throughput does not depend on the task."""
    import random

    from datasets import Dataset

    rng = random.Random(seed)
    rows = {"prompt": [], "answer": []}
    for _ in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        rows["prompt"].append([{"role": "user", "content": f"What is {a} + {b}? Think step by step, "
                                                          "then give the number after 'Answer:'."}])
        rows["answer"].append(str(a + b))
    return Dataset.from_dict(rows)


def answer_reward(completions, answer, **kwargs):
    """1.0 when the last number in the completion is the answer (TRL signature, conversational completions)."""
    import re

    out = []
    for c, a in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c
        nums = re.findall(r"-?\d+", text)
        out.append(1.0 if nums and nums[-1] == a else 0.0)
    return out


def token_reward(completions, completion_ids, **kwargs):
    """A reward that varies even when the text is empty (random models): keeps advantages non-zero."""
    return [float(sum(ids) % 7) / 6.0 for ids in completion_ids]


def resolve_mode(args) -> str:
    import torch

    if args.tiny:
        return "tiny"
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run with --tiny for the CPU smoke test")
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(args.model)
        have_weights = True
    except Exception as e:  # offline, no hub, no local copy
        print(f"[gpu_bench] no weights for {args.model!r} ({type(e).__name__}): using the 0.5B-shaped random model")
        have_weights = False
    if not have_weights:
        return "shaped"
    from trl.import_utils import is_vllm_available

    return "real+vllm" if (is_vllm_available() and not args.no_vllm) else "real"


def build_model(mode: str, model_name: str, workdir: str):
    """(model or path, tokenizer, description)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer

    if mode == "tiny":
        tok = tiny_tokenizer()
        path = f"{workdir}/tiny-qwen2"
        tiny_qwen(tok).save_pretrained(path)
        tok.save_pretrained(path)
        return path, tok, "tiny Qwen2 (random, hidden 64, 2 layers, vocab 512)"
    if mode == "shaped":
        tok = tiny_tokenizer()
        cfg = Qwen2Config(**QWEN25_05B, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                          bos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        path = f"{workdir}/qwen2.5-0.5b-shaped"
        model.save_pretrained(path)
        tok.save_pretrained(path)
        n = sum(p.numel() for p in model.parameters())
        del model
        return path, tok, f"Qwen2.5-0.5B-shaped random init ({n / 1e6:.0f}M params, local 512-token tokenizer)"
    tok = AutoTokenizer.from_pretrained(model_name)
    return model_name, tok, model_name


def run_variant(variant: str, mode: str, args) -> dict:
    """Train ``args.steps`` steps of ``variant``; return the measured row."""
    import torch
    from transformers import TrainerCallback

    from grpo_lessons.integrations.trl_bridge import grpo_config, make_trainer

    gpu = torch.cuda.is_available() and mode != "tiny"
    if mode == "tiny":
        torch.set_num_threads(1)  # a 0.1M-parameter model: threads only add contention on shared cores
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    workdir = tempfile.mkdtemp(prefix="gpu-bench-")
    model, tok, described = build_model(mode, args.model, workdir)
    G = args.num_generations
    overrides = dict(
        output_dir=f"{workdir}/out", max_steps=args.steps, logging_steps=1, save_strategy="no", seed=0,
        num_generations=G, per_device_train_batch_size=G * args.prompts_per_step,
        max_completion_length=args.max_completion_length, temperature=1.0,
        gradient_checkpointing=gpu,  # beta: the variant's own (grpo_config reads its registry entry)
        mask_truncated_completions=False,  # a random model never ends: keep its tokens in the loss
        # fp32 master weights under bf16 compute (grpo_config sets bf16=True on a GPU that has it): a model trained
        # in bf16 weights rounds most small AdamW steps away.  TRL's own default for a model given by name, made
        # explicit so that a changed default cannot turn this benchmark into bf16-weight training.
        model_init_kwargs={"dtype": "float32"},
    )
    if mode == "tiny":
        overrides.update(use_cpu=True, bf16=False)
    if mode == "real+vllm":
        overrides.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=args.vllm_mem,
                         vllm_max_model_length=1024 + args.max_completion_length)
    cfg = grpo_config(variant, **overrides)
    rewards = [answer_reward, token_reward] if mode.startswith("real") else [token_reward]

    times: list[float] = []
    started = time.perf_counter()

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t0)
            if time.perf_counter() - started > args.variant_budget_s:
                control.should_training_stop = True  # stay inside the window

    trainer = make_trainer(variant, model=model, args=cfg, reward_funcs=rewards, train_dataset=prompts_dataset(),
                           processing_class=tok, callbacks=[Timer()])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    n_completions = G * args.prompts_per_step
    timed = times[1:] if len(times) > 1 else times  # the first step pays for warm-up (kernels, CUDA graphs)
    timed_tokens = [h["completions/mean_length"] * n_completions for h in logs][-len(timed):]
    row = {
        "variant": variant, "mode": mode, "model": described, "steps": len(times),
        "num_generations": G, "prompts_per_step": args.prompts_per_step,
        "max_completion_length": args.max_completion_length,
        "precision": "bf16" if cfg.bf16 else ("fp16" if cfg.fp16 else "fp32"),
        "step_time_s": statistics.median(timed),
        "completion_tokens_per_s": sum(timed_tokens) / sum(timed),
        "mean_completion_length": statistics.mean(h["completions/mean_length"] for h in logs),
        "peak_gpu_mem_gib": (torch.cuda.max_memory_allocated() / 2**30) if gpu else None,
        "reward_first": logs[0].get("reward"), "reward_last": logs[-1].get("reward"),
        "device": torch.cuda.get_device_name(0) if gpu else f"CPU ({platform.processor() or platform.machine()}, "
                                                              f"{os.cpu_count()} cores)",
        "torch": torch.__version__,
    }
    del trainer
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
    return row


def table(rows: list[dict]) -> str:
    head = "| variant | mode | step time (s) | completion tokens/s | peak GPU mem (GiB) | precision | G x prompts | max len |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        mem = "n/a (CPU)" if r["peak_gpu_mem_gib"] is None else f"{r['peak_gpu_mem_gib']:.1f}"
        lines.append(f"| {r['variant']} | {r['mode']} | {r['step_time_s']:.3f} | {r['completion_tokens_per_s']:.0f} | "
                     f"{mem} | {r['precision']} | {r['num_generations']} x {r['prompts_per_step']} | "
                     f"{r['max_completion_length']} |")
    first = rows[0]
    lines.append(f"\nmodel: {first['model']}; device: {first['device']}; torch {first['torch']}; "
                 f"step time = median after one warm-up step")
    return "\n".join(lines)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU smoke mode on the tiny Qwen2 (< 1 minute)")
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="hub name or local path")
    p.add_argument("--variants", nargs="+", default=["grpo", "dapo"])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per variant (default 3 tiny, 8 GPU)")
    p.add_argument("--num-generations", type=int, default=None)
    p.add_argument("--prompts-per-step", type=int, default=None)
    p.add_argument("--max-completion-length", type=int, default=None)
    p.add_argument("--vllm-mem", type=float, default=0.3, help="vllm_gpu_memory_utilization (colocate)")
    p.add_argument("--no-vllm", action="store_true")
    p.add_argument("--budget-s", type=float, default=540.0, help="whole run; each variant gets its share")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    p.add_argument("--child-mode", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    tiny = a.tiny
    a.steps = a.steps or (3 if tiny else 8)
    a.num_generations = a.num_generations or (4 if tiny else 8)
    a.prompts_per_step = a.prompts_per_step or (2 if tiny else 4)
    a.max_completion_length = a.max_completion_length or (8 if tiny else 256)
    a.variant_budget_s = a.budget_s / max(len(a.variants), 1)
    return a


def main(argv=None) -> list[dict]:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:  # one GPU variant in a fresh process
        row = run_variant(args.child, args.child_mode, args)
        print("GPU_BENCH_ROW " + json.dumps(row))
        return [row]
    mode = resolve_mode(args)
    rows = []
    for variant in args.variants:
        if mode == "tiny":
            rows.append(run_variant(variant, mode, args))
            continue
        cmd = [sys.executable, __file__, "--child", variant, "--child-mode", mode, "--model", args.model,
               "--steps", str(args.steps), "--num-generations", str(args.num_generations),
               "--prompts-per-step", str(args.prompts_per_step), "--max-completion-length",
               str(args.max_completion_length), "--vllm-mem", str(args.vllm_mem),
               "--budget-s", str(args.variant_budget_s), "--variants", variant]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.variant_budget_s + 120)
        except subprocess.TimeoutExpired:
            print(f"[gpu_bench] {variant}: timed out after {args.variant_budget_s + 120:.0f} s")
            continue
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("GPU_BENCH_ROW ")]
        if proc.returncode != 0 or not found:
            print(f"[gpu_bench] {variant} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            continue
        rows.append(json.loads(found[-1][len("GPU_BENCH_ROW "):]))
    if not rows:
        raise SystemExit("no variant finished")
    print(table(rows))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"gpu_bench-{rows[0]['mode']}-{stamp}.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
