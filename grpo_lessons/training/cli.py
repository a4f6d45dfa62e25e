"""``grpo-lessons``: the command line.

    grpo-lessons train                                   # SmolLM2-135M-Instruct on arithmetic, offline, CPU
    grpo-lessons train --model tiny-qwen2 --steps 2      # a seconds-long smoke run
    grpo-lessons train --variant dapo --lora --lr 2e-4 --out runs/dapo
    grpo-lessons train --precision bf16-mixed --sampler-dtype bfloat16   # the fast CPU settings
    grpo-lessons train --reward my_rewards:brevity=0.5 --reward my_rewards:correct   # your own reward functions
    grpo-lessons train --plugin my_variants --variant my_method                     # a variant your module registers
    grpo-lessons variants                                # the registry: name, paper, TRL settings
    grpo-lessons lab --list                              # the claims table on exact policies (torch only)
    grpo-lessons compare --variants grpo,dr_grpo --seeds 0,1,2 --steps 8 --out runs/cmp   # a paired, seeded study

``train`` writes ``<out>/metrics.csv`` (one row per step), ``<out>/curves.png`` (reward and held-out
accuracy), ``<out>/config.json`` and ``<out>/summary.json``; ``<out>/checkpoint.pt``, for ``--resume``, as
``--checkpoint`` says (by default only when ``--max-minutes`` stops a run before ``--steps``).  Introduced in ``notebooks/05_grpo_end_to_end.ipynb``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields

__all__ = ["main", "build_parser", "config_from_args"]


def _bool_flag(p: argparse.ArgumentParser, name: str, help: str) -> None:
    p.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction, default=None,
                   help=help + " (default: the variant's)")


def _plugin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", dest="plugins", action="append", default=None, metavar="MODULE",
                   help="import MODULE first (importable, or a .py file in the current directory): the variants and "
                        "pieces it registers with grpo_lessons.core.variants.register (register_objective, ...) are "
                        "then known to --variant(s). Repeat for several")


def _plugin_modules(argv: Sequence[str]) -> list[str]:
    """The ``--plugin`` modules anywhere in ``argv``: imported before the parser is built, so that the variants they
    register are listed in ``--help`` and accepted by ``--variant``."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--plugin", action="append", default=[])
    known, _ = pre.parse_known_args(list(argv))
    return known.plugin


def build_parser() -> argparse.ArgumentParser:
    """The ``grpo-lessons`` parser; the variant and rollout-correction names in its help come from the registries
    (a variant or piece registered before the parser is built is listed and accepted)."""
    from grpo_lessons.core.correction import CORRECTION_MODES
    from grpo_lessons.core.variants import VARIANTS

    from .train_config import CHECKPOINT_POLICIES
    from .trainer import TrainConfig

    d = TrainConfig()
    p = argparse.ArgumentParser(prog="grpo-lessons", description="GRPO lessons: train a small model with GRPO.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a model with GRPO (CPU defaults, offline)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--model", default=d.model,
                   help="smollm2 (offline SmolLM2-135M-Instruct), tiny-qwen2, tiny-qwen3, a hub name or a local path")
    t.add_argument("--task", default=d.task, help="arithmetic or countdown")
    t.add_argument("--variant", default=d.variant, metavar="VARIANT",
                   help=f"a registered variant: {', '.join(sorted(VARIANTS))} (grpo-lessons variants describes them)")
    t.add_argument("--steps", type=int, default=d.steps)
    t.add_argument("--prompts-per-step", type=int, default=None,
                   help="prompts (groups) per step (default: 8; 2-grpo: 32, the same completions per step as G = 8)")
    t.add_argument("--group-size", "-G", type=int, default=None,
                   help="completions per prompt (default: 8; 2-grpo: 2, the G that defines it)")
    t.add_argument("--lr", type=float, default=d.lr)
    t.add_argument("--beta", type=float, default=None, help="KL coefficient (default: the variant's)")
    t.add_argument("--epsilon", type=float, default=None, help="clip range; given alone it sets both sides, as in TRL (default: the variant's pair)")
    t.add_argument("--epsilon-high", type=float, default=None)
    t.add_argument("--mu", type=int, default=d.mu, help="optimiser steps per sampled batch")
    t.add_argument("--max-new-tokens", type=int, default=None,
                   help="completion token limit (default: the task's; arithmetic 12, countdown 32)")
    t.add_argument("--temperature", type=float, default=d.temperature)
    t.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm)
    t.add_argument("--eval-every", type=int, default=d.eval_every)
    t.add_argument("--eval-size", type=int, default=d.eval_size)
    t.add_argument("--micro-batch-size", type=int, default=d.micro_batch_size)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--out", default=None, help="run directory (default: runs/<task>-<variant>)")
    t.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of every weight")
    t.add_argument("--lora-r", type=int, default=d.lora_r)
    t.add_argument("--checkpoint", default=d.checkpoint, choices=CHECKPOINT_POLICIES,
                   help="when <out>/checkpoint.pt (weights + optimiser: ~1.6 GB for SmolLM2) is written: never; "
                        "unfinished (default): only when --max-minutes stops the run before --steps, so --resume "
                        "can finish it; end: at the end of every run, to continue it later with more --steps")
    t.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                   help="also save a checkpoint every N steps, so a killed run can --resume (0: off)")
    t.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt if it exists")
    _bool_flag(t, "dynamic-sampling", "DAPO dynamic sampling: drop all-equal groups and refill")
    t.add_argument("--max-resample-rounds", type=int, default=d.max_resample_rounds)
    _bool_flag(t, "mask-truncated-completions", "DAPO overlong filtering: no loss on truncated completions")
    t.add_argument("--overlong-cache-len", type=int, default=None,
                   help="DAPO soft overlong penalty over the last N tokens before --max-new-tokens (default: off)")
    t.add_argument("--reward-weights", type=float, nargs="+", default=None,
                   help="one weight per reward function (the task's, or those of --reward)")
    t.add_argument("--reward", dest="rewards", action="append", default=None, metavar="MODULE:FUNCTION[=WEIGHT]",
                   help="train on your own reward function instead of the task's: FUNCTION in MODULE (importable, or "
                        "a .py file in the current directory), called as TRL calls reward functions, "
                        "f(completions, **kwargs) -> one number per completion; WEIGHT defaults to 1. Repeat for "
                        "several (their weighted sum is the reward); metrics.csv gets a reward_<FUNCTION> column each. "
                        "Held-out accuracy stays the task's")
    _plugin_flag(t)
    t.add_argument("--max-completions", type=int, default=None, metavar="N",
                   help="sample at most N completions (a budget in samples: the run stops when the next step would "
                        "not fit, and dynamic sampling refills only within what is left, so it takes fewer steps); "
                        "--steps stays the upper bound")
    t.add_argument("--max-minutes", type=float, default=None,
                   help="stop after this much training time in this invocation, evaluation excluded (a --resume gets a new budget)")
    t.add_argument("--precision", default=d.precision, choices=["auto", "fp32", "bf16-mixed"],
                   help="bf16-mixed: forward/backward on a bf16 copy of the weights, fp32 master weights and loss; "
                        "auto (default): bf16-mixed on a CUDA GPU with bf16, else fp32")
    t.add_argument("--sampler-dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="sample with a copy of the weights in this dtype, resynced after every update "
                        "(default: the trained model samples; no train/inference gap)")
    t.add_argument("--copy-rounding", default=d.copy_rounding, choices=["dither", "nearest"],
                   help="how the fp32 weights are rounded into the bf16 copies after each update: dither (a fixed "
                        "random threshold per weight; the copy follows small updates) or nearest")
    t.add_argument("--sampler-fp32-head", action=argparse.BooleanOptionalAction, default=d.sampler_fp32_head,
                   help="the low-precision sampler computes its logits with an fp32 LM head")
    t.add_argument("--attn-implementation", default=d.attn_implementation,
                   help="auto (gqa on a CPU for Llama/SmolLM2, Mistral and Qwen models, where plain-matmul "
                        "grouped-query attention is exact; the model's own otherwise), gqa, or a transformers name "
                        "such as eager or sdpa")
    # On here, off in TrainConfig: this process only trains, so the allocator may keep what it frees
    t.add_argument("--reuse-freed-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="Linux, on a CPU: glibc keeps freed memory for reuse instead of unmapping it (faster CPU "
                        "steps); changes the allocator of this whole process, which keeps what it has freed "
                        "(TrainConfig's default is off, for library and notebook use)")
    t.add_argument("--optimizer", default=d.optimizer, choices=["adamw-fused", "adamw-foreach", "adamw"])
    t.add_argument("--rollout-correction", default=None, metavar="MODE",
                   help=f"correct the sampler/trainer gap in the loss: {', '.join(CORRECTION_MODES)} (see policy_loss; "
                        "default: none)")
    t.add_argument("--rollout-clip-max", type=float, default=d.rollout_clip_max)
    t.add_argument("--rollout-clip-min", type=float, default=None)
    t.add_argument("--off-policy-mask-threshold", type=float, default=None)
    # entropy bonus, ScaleRL's retirement of solved prompts, DPPO top-K (TrainConfig fields of the same names)
    t.add_argument("--entropy-bonus", type=float, default=d.entropy_bonus,
                   help="alpha of the entropy bonus (0: off); --entropy-in says where it enters")
    t.add_argument("--entropy-in", choices=("reward", "loss"), default=d.entropy_in,
                   help="reward: r_i += alpha * H_i (sampler's mean token entropy); loss: loss -= alpha * entropy")
    t.add_argument("--retire-solved-at", type=float, default=None,
                   help="retire prompts for good once their group pass rate reaches this (ScaleRL: 0.9; default: off)")
    t.add_argument("--topk", type=int, default=d.topk,
                   help="sampler tokens recorded per position for DPPO's top-K variants (dppo_topk_tv/kl)")
    t.add_argument("--save-model", action="store_true", help="write the trained model/adapter to <out>/model")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    _plugin_flag(sub.add_parser("variants", help="list the registered GRPO variants"))
    sub.add_parser("lab", help="rerun a claim of the claims table on an exact policy (grpo-lessons lab --help)",
                   add_help=False)
    sub.add_parser("tasks", help="list the generated tasks")
    _compare_parser(sub)
    return p


def _csv_list(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _seed_list(text: str) -> list[int]:
    try:
        return [int(x) for x in _csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers, got {text!r}") from None


#: What ``compare`` analyses besides the gain: accuracy on the last two evaluations, what was sampled and how much of
#: it was informative, and the length, entropy and clipping the variants are designed to change.
COMPARE_METRICS = ("gain_last2", "completions_sampled_total", "frac_zero_std_mean", "completion_len_last5",
                   "entropy_last5", "clip_frac_mean")


def _compare_parser(sub) -> None:
    c = sub.add_parser(
        "compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="a paired, seeded comparison of variants on a task and model of your choice",
        description="""Train every variant with every seed on the same task, model and budget, then analyse the runs
as a paired comparison: each variant's gain in held-out accuracy (after minus before) with its 95 % t-interval over
seeds, and its paired difference to the baseline (the first variant), seed by seed, with its interval; verdicts are
Holm-corrected over the comparisons to the baseline.  The arms share their seeds, so two arms of one seed sample the
same first batch wherever the variant does not change sampling (the runs' batch_hash column shows it).

Single change: every arm gets the same --beta (default 0, whatever the variants' paper defaults are), so a difference
comes from the variants' pieces, not from a KL term only one arm has.  Pass --beta -1 to keep each variant's own.
Every arm trains --steps steps; with --max-completions N every arm samples at most N completions instead (an arm
that samples more per step, as dynamic sampling does, then takes fewer steps).  Besides the gain, each --metrics
column (the mechanism a variant is for: samples, zero-std share, length, entropy, clip fraction, ...) gets the same
paired analysis.

Writes <out>/runs/<variant>/seed<k>/metrics.csv (the trainer's log), run.json, summary.csv, analysis.json,
curves.png, gains.png and RESULT.md.  Resumable: rerun the same command to finish an interrupted study;
--analyse-only redoes the analysis from the runs.""",
        epilog="""examples:
  grpo-lessons compare --variants grpo,dr_grpo --seeds 0,1,2,3,4 --max-new-tokens 48 --out runs/len
  grpo-lessons compare --variants grpo,gspo --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --out runs/gspo
  grpo-lessons compare --variants grpo,dapo --steps 40 --max-completions 1024 --out runs/ds  (equal samples)
  grpo-lessons compare --variants grpo,dapo --model tiny-qwen2 --steps 2 --seeds 0,1 --out /tmp/smoke  (seconds)""")
    c.add_argument("--variants", type=_csv_list, required=True, metavar="V1,V2,...",
                   help="registered variants, comma-separated; the first is the baseline")
    c.add_argument("--seeds", type=_seed_list, default=[0, 1, 2], metavar="S1,S2,...",
                   help="the seeds every variant runs with (default 0,1,2; at least 2)")
    c.add_argument("--task", default="arithmetic", help="a generated task (grpo-lessons tasks lists them)")
    c.add_argument("--model", default="smollm2", help="smollm2 (offline), tiny-qwen2, a hub name or a local path")
    c.add_argument("--device", default="cpu")
    c.add_argument("--steps", type=int, default=8)
    c.add_argument("--prompts-per-step", type=int, default=8)
    c.add_argument("--group-size", "-G", type=int, default=8)
    c.add_argument("--lr", type=float, default=3e-5)
    c.add_argument("--beta", type=float, default=0.0,
                   help="KL coefficient of every arm (default 0: one change per comparison); -1: each variant's own")
    c.add_argument("--mu", type=int, default=1, help="optimiser steps per sampled batch")
    c.add_argument("--max-completions", type=int, default=None, metavar="N",
                   help="every run samples at most N completions (compare at equal samples rather than equal "
                        "steps: an arm with dynamic sampling then takes fewer steps); --steps is the upper bound")
    c.add_argument("--max-new-tokens", type=int, default=None, help="completion token limit (default: the task's)")
    c.add_argument("--eval-size", type=int, default=100, help="held-out prompts per evaluation")
    c.add_argument("--eval-every", type=int, default=4)
    c.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16-mixed"])
    c.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    c.add_argument("--out", required=True, help="the study folder")
    c.add_argument("--analyse-only", action="store_true", help="only redo the analysis of the runs in --out")
    c.add_argument("--title", default=None, help="RESULT.md's title (default: the variants, task and model)")
    c.add_argument("--question", default=None,
                   help="the question the study asks, written at the top of RESULT.md (default: whether each "
                        "variant changes held-out accuracy against the first)")
    c.add_argument("--metrics", type=_csv_list, default=list(COMPARE_METRICS), metavar="M1,M2,...",
                   help="summary.csv columns analysed like the gain, each with its paired interval and Holm "
                        f"verdicts (default: {','.join(COMPARE_METRICS)})")
    _plugin_flag(c)


def _compare(args) -> int:
    import torch

    from grpo_lessons.core.variants import get_variant

    from .study import Arm, Study, analyse_study, run_study

    if args.threads:
        torch.set_num_threads(args.threads)
    variants = list(dict.fromkeys(args.variants))
    if len(variants) < 2:
        raise ValueError(f"a comparison needs at least two different variants, got {args.variants}")
    for v in variants:
        get_variant(v)  # a clear error naming the known variants
    from .stats import SUMMARY_COLUMNS

    unknown = [m for m in args.metrics if m not in SUMMARY_COLUMNS]
    if unknown:
        raise ValueError(f"unknown --metrics {unknown}: choose from the summary columns {list(SUMMARY_COLUMNS)}")
    base = {"task": args.task, "model": args.model, "device": args.device, "steps": args.steps,
            "prompts_per_step": args.prompts_per_step, "group_size": args.group_size, "lr": args.lr, "mu": args.mu,
            "eval_size": args.eval_size, "eval_every": args.eval_every, "precision": args.precision,
            "kl_start_every": 1}
    if args.max_new_tokens is not None:
        base["max_new_tokens"] = args.max_new_tokens
    if args.max_completions is not None:
        base["max_completions"] = args.max_completions
    if args.beta is not None and args.beta >= 0:
        base["beta"] = args.beta
    if args.plugins:  # each run's config records (and re-imports) the modules its variant comes from
        base["plugins"] = tuple(args.plugins)
    arms = []
    for v in variants:
        cfg = {"variant": v}
        fixed = get_variant(v).fixed_group_size
        if fixed is not None:  # 2-GRPO is defined by its G: the same completions per step, more prompts
            cfg.update(group_size=fixed, prompts_per_step=args.prompts_per_step * args.group_size // fixed)
        arms.append(Arm(v.replace("/", "_"), cfg, label=get_variant(v).title,
                        sampling="shared" if fixed is None and not get_variant(v).train_defaults.get("dynamic_sampling")
                        else v))
    study = Study(name="compare", title=args.title or f"{' vs '.join(variants)} on {args.task}, {args.model}",
                  question=args.question
                  or f"Does each variant change held-out accuracy against {variants[0]}, seed by seed?",
                  arms=arms, seeds=list(args.seeds), base=base, min_seeds=2, extra_metrics=tuple(args.metrics),
                  budget=f"{args.steps} steps of {args.prompts_per_step} prompts x G = {args.group_size} per run"
                  + (f", at most {args.max_completions} sampled completions" if args.max_completions else ""))
    if args.analyse_only:
        analyse_study(study, args.out)
    else:
        run_study(study, args.out)
    print(f"wrote {os.path.join(args.out, 'RESULT.md')}")
    return 0


def config_from_args(args: argparse.Namespace):
    """A :class:`~grpo_lessons.training.trainer.TrainConfig` from parsed ``train`` arguments."""
    from .trainer import TrainConfig

    names = {f.name for f in fields(TrainConfig)}
    kw = {k: v for k, v in vars(args).items() if k in names}
    if kw.get("out") is None:
        kw["out"] = os.path.join("runs", f"{args.task}-{args.variant}")
    if kw.get("reward_weights") is not None:
        kw["reward_weights"] = tuple(kw["reward_weights"])
    if kw.get("rewards") is not None:
        kw["rewards"] = tuple(kw["rewards"])
    kw["plugins"] = tuple(kw.get("plugins") or ())
    return TrainConfig(**kw)


def _train(args) -> int:
    from .trainer import train
    from .plots import save_plot

    cfg = config_from_args(args)
    cfg.validate()
    if cfg.rollout_correction is not None:  # a name the registry lacks fails here, not at the first update
        from grpo_lessons.core.correction import CORRECTION_MODES

        CORRECTION_MODES.lookup(cfg.rollout_correction, "--rollout-correction")
    print(f"grpo-lessons train: model={cfg.model} task={cfg.task} variant={cfg.variant} steps={cfg.steps} "
          f"P={cfg.resolve().prompts_per_step} G={cfg.resolve().group_size} lr={cfg.lr:g} out={cfg.out}", flush=True)
    own = cfg.reward_functions()
    if own is not None:
        from .scoring import reward_names

        names = reward_names(own[0])
        print("rewards: " + ", ".join(f"{n} x {w:g}" for n, w in zip(names, own[1]))
              + f" (metrics.csv: {', '.join('reward_' + n for n in names)})", flush=True)
    result = train(cfg, progress=not args.no_progress)
    png = save_plot(result.history, os.path.join(cfg.out, "curves.png"),
                    title=f"{cfg.model} / {cfg.task} / {cfg.variant}")
    trained = [r for r in result.history if r.get("seconds") is not None and r.get("reward_mean") is not None]
    summary = {
        "initial_accuracy": None if result.initial_eval is None else result.initial_eval["accuracy"],
        "final_accuracy": None if result.final_eval is None else result.final_eval["accuracy"],
        "steps": result.history[-1]["step"] if result.history else 0,
        "minutes": round(sum(r["seconds"] for r in trained) / 60, 3),
        "metrics_csv": str(result.csv_path),
        "curves_png": png,
        "config": result.config,
    }
    tmp = os.path.join(cfg.out, ".summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, default=str)
    os.replace(tmp, os.path.join(cfg.out, "summary.json"))
    acc = ""
    if summary["initial_accuracy"] is not None:
        acc = f"held-out accuracy {summary['initial_accuracy']:.1%} -> {summary['final_accuracy']:.1%}; "
    print(f"done: {acc}{summary['steps']} steps in {summary['minutes']:.1f} min; wrote {result.csv_path} and {png}")
    return 0


def _variants() -> int:
    from grpo_lessons.core.variants import VARIANTS

    for name in sorted(VARIANTS):
        v = VARIANTS[name]
        pieces = f"{v.advantage_scale} advantages, {v.ratio_level} ratio, {v.objective} objective, {v.aggregation}"
        trl = dict(v.trl) if v.in_trl else "not in TRL's GRPOTrainer (GRPOLessonsTrainer computes it)"
        print(f"{name:12s} {v.title}\n{'':12s} {v.citation}\n{'':12s} pieces: {pieces}\n{'':12s} TRL: {trl}")
    return 0


def _tasks() -> int:
    from .data import TASKS

    for name, task in sorted(TASKS.items()):
        print(f"{name:12s} {task.description}")
    return 0


#: The extra that brings each library the command line may need.
_EXTRA_OF = {"transformers": "train", "accelerate": "train", "peft": "train", "tokenizers": "train", "gguf": "train",
             "safetensors": "train", "datasets": "train", "matplotlib": "train", "tqdm": "train", "trl": "trl"}


def _missing_extra(e: ModuleNotFoundError) -> int:
    top = (e.name or "").split(".")[0]
    extra = _EXTRA_OF.get(top)
    if extra is None:
        raise e
    print(f"grpo-lessons: error: this command needs {top}, which the package's [{extra}] extra installs: "
          f"pip install '.[{extra}]' in a checkout of grpo-lessons (or the wheel built from it, with [{extra}]). "
          "`grpo-lessons lab` needs torch alone.", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``grpo-lessons`` console script; returns the exit status."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lab"]:  # the lab needs torch alone: dispatch before the trainer's parser imports transformers
        from grpo_lessons.lab.cli import main as lab_main

        return lab_main(argv[1:])
    registered: dict[str, list[str]] = {}
    plugins = _plugin_modules(argv[1:])
    if plugins:  # before the parser: the variants they register are listed in --help and accepted by --variant
        from .plugins import import_plugins

        try:
            registered = import_plugins(plugins)
        except ValueError as e:
            print(f"grpo-lessons: error: {e}", file=sys.stderr)
            return 2
    try:
        args = build_parser().parse_args(argv)
    except ModuleNotFoundError as e:  # a core install: the trainer's parser needs the [train] extra
        return _missing_extra(e)
    if args.command in ("train", "compare"):
        for module, names in registered.items():
            print(f"plug-in {module}: registered {', '.join(f'variant {n!r}' for n in names) or 'no new variant'}",
                  flush=True)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "variants":
            return _variants()
        if args.command == "compare":
            return _compare(args)
        return _tasks()
    except (ValueError, RuntimeError, FileNotFoundError, FloatingPointError) as e:
        # Bad settings and bad data get one clear line, not a traceback.
        print(f"grpo-lessons: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        return _missing_extra(e)
    except KeyboardInterrupt:
        print("grpo-lessons: interrupted; with --checkpoint-every N, rerun with --resume to continue from the last "
              "checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
