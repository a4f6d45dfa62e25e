"""Train any registry variant with TRL on one process or many: ``python -m grpo_lessons.integrations.trl_train``.

The same module runs under every launcher TRL supports, so nothing here starts processes itself::

    python -m grpo_lessons.integrations.trl_train --variant dapo --dynamic-sampling          # 1 process (CPU or 1 GPU)
    torchrun --nproc_per_node 2 -m grpo_lessons.integrations.trl_train --variant gspo         # DDP, plain torchrun
    accelerate launch --config_file configs/accelerate/zero2.yaml -m grpo_lessons.integrations.trl_train \\
        --variant dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k           # DeepSpeed ZeRO-2
    # generation on a separate vLLM server (start it first: trl vllm-serve --model ...)
    accelerate launch --config_file configs/accelerate/ddp.yaml -m grpo_lessons.integrations.trl_train \\
        --variant dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --vllm-server localhost:8000

Every run goes through :class:`grpo_lessons.integrations.trl_bridge.GRPOLessonsTrainer` (the loss of
:func:`grpo_lessons.policy_loss`, TRL's generation, scoring, sharding and optimiser), with the variant's
paper settings from :func:`grpo_lessons.integrations.trl_bridge.grpo_config`.  Defaults work offline: a tiny random
Qwen2 (``--model tiny-qwen2``) on the generated arithmetic task.  ``--set field=value`` passes any other
``GRPOConfig`` field (values are read as JSON, else kept as strings).

Batch sizes follow TRL: each process generates ``per_device_train_batch_size * steps_per_generation``
completions per generation round, so the global batch is that times the number of processes, and it
must be a multiple of ``--num-generations``.  To compare a 1-process and an N-process run, divide
``--per-device-train-batch-size`` by N (the README's "Beyond one machine" section; notebook 19 covers
TRL itself).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Sequence

__all__ = ["build_parser", "parse_sets", "grpo_fields", "build_trainer", "main", "TINY_MODEL"]

TINY_MODEL = "tiny-qwen2"
TASK_CHOICES = ("arithmetic", "countdown", "gsm8k")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m grpo_lessons.integrations.trl_train``."""
    from grpo_lessons.core.variants import VARIANTS

    p = argparse.ArgumentParser(prog="python -m grpo_lessons.integrations.trl_train",
                                description="Train a registry variant inside TRL's GRPOTrainer, on 1 or N processes.")
    p.add_argument("--variant", default="grpo", choices=sorted(VARIANTS), help="registry variant (default: grpo)")
    p.add_argument("--model", default=TINY_MODEL,
                   help=f"hub name or local directory; {TINY_MODEL!r} (default) saves the offline tiny Qwen2")
    p.add_argument("--task", default="arithmetic", choices=TASK_CHOICES,
                   help="arithmetic/countdown are generated offline; gsm8k needs the hub or a datasets cache")
    p.add_argument("--output-dir", default="runs/trl_train", help="checkpoints, logs and the final model")
    p.add_argument("--max-steps", type=int, default=10, help="optimizer steps (default: 10)")
    p.add_argument("--per-device-train-batch-size", type=int, default=8,
                   help="completions per process per optimizer micro-step (default: 8)")
    p.add_argument("--gradient-accumulation-steps", type=int, default=1)
    p.add_argument("--num-generations", type=int, default=None,
                   help="group size G (default: 4; fixed by the variant for 2-grpo)")
    p.add_argument("--max-completion-length", type=int, default=None,
                   help="completion budget in tokens (default: the task's, gsm8k 256)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="default: the registry's paper value, else 1e-6 on a hub model and 1e-3 on the tiny one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO's dynamic sampling: drop groups with equal rewards and refill them")
    p.add_argument("--max-sampling-rounds", type=int, default=4, help="refill rounds per batch (dynamic sampling)")
    p.add_argument("--loss-impl", default="grpo_lessons", choices=("grpo_lessons", "trl"),
                   help="whose loss: the package's policy_loss (default) or TRL's own")
    p.add_argument("--vllm-server", default=None, metavar="HOST:PORT",
                   help="generate on a running `trl vllm-serve` (use_vllm=True, vllm_mode='server')")
    p.add_argument("--vllm-colocate", action="store_true", help="generate with vLLM inside each training process")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--no-save", action="store_true", help="do not save the final model")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                   help="any other GRPOConfig field, e.g. --set beta=0.04 --set logging_steps=5 (repeatable)")
    return p


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["beta=0.04", "report_to=wandb"]`` -> ``{"beta": 0.04, "report_to": "wandb"}`` (JSON values, else strings).

    Raises ``ValueError`` for an item without ``=``.  Values are parsed with ``json.loads`` only.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _process_index() -> int:
    """This process's rank as set by torchrun / accelerate launch (0 when launched alone)."""
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))


def _save_tiny(save, out: Path) -> str:
    """Save the tiny Qwen2 where every process can load it; returns its directory.

    Before the process group exists (a fresh launch), each process writes its own copy (``tiny_qwen`` is
    seeded, so the copies are equal, and DDP broadcasts rank 0's weights anyway).  Once it exists,
    ``save_pretrained`` writes on rank 0 only, so rank 0 writes one copy and the others wait for it.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return save(str(out / f"tiny-qwen2-rank{_process_index()}"))
    path = out / "tiny-qwen2"
    if dist.get_rank() == 0:
        save(str(path))
    dist.barrier()
    return str(path)


def _dataset_and_rewards(task: str):
    """A ``datasets.Dataset`` in TRL's conversational format, the reward functions and their weights."""
    from datasets import Dataset

    from grpo_lessons.training.data import get_task, load_gsm8k

    if task == "gsm8k":
        from grpo_lessons.core.rewards import format_reward, gsm8k_reward

        rows, funcs, weights, budget = load_gsm8k("train"), [gsm8k_reward, format_reward], [1.0, 0.1], 256
    else:
        t = get_task(task)
        rows, funcs, weights, budget = t.rows("train"), list(t.reward_funcs), list(t.reward_weights), t.max_new_tokens
    return Dataset.from_list(rows), funcs, weights, budget


def grpo_fields(a: argparse.Namespace, reward_weights: Sequence[float], budget: int) -> dict[str, Any]:
    """The ``GRPOConfig`` fields the command line asks for, on top of the variant's (see :func:`grpo_config`).

    ``a``: parsed arguments of :func:`build_parser`; ``reward_weights``: one per reward function;
    ``budget``: the task's completion length, used when ``--max-completion-length`` is not given.
    Raises ``ValueError`` for a malformed ``--vllm-server``, both vLLM modes at once, or a group size
    that contradicts the variant (2-GRPO fixes G = 2).
    """
    from grpo_lessons.core.variants import get_variant

    v = get_variant(a.variant)
    fields: dict[str, Any] = dict(
        output_dir=a.output_dir, max_steps=a.max_steps, seed=a.seed,
        per_device_train_batch_size=a.per_device_train_batch_size,
        gradient_accumulation_steps=a.gradient_accumulation_steps,
        max_completion_length=a.max_completion_length or budget,
        reward_weights=list(reward_weights), logging_steps=1, save_strategy="no",
        gradient_checkpointing=a.gradient_checkpointing,
    )
    if v.fixed_group_size is None:
        fields["num_generations"] = a.num_generations or 4
    elif a.num_generations not in (None, v.fixed_group_size):
        raise ValueError(f"{v.name} fixes the group size to {v.fixed_group_size}; drop --num-generations")
    if a.learning_rate is not None:
        fields["learning_rate"] = a.learning_rate
    elif "learning_rate" not in v.train_defaults:
        fields["learning_rate"] = 1e-3 if a.model == TINY_MODEL else 1e-6
    if a.vllm_server and a.vllm_colocate:
        raise ValueError("choose one of --vllm-server and --vllm-colocate")
    if a.vllm_server:
        host, _, port = a.vllm_server.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--vllm-server expects HOST:PORT, got {a.vllm_server!r}")
        # TRL 1.16 GRPOConfig: the trainer sends prompts to `trl vllm-serve` and pushes weights to it
        fields.update(use_vllm=True, vllm_mode="server", vllm_server_host=host, vllm_server_port=int(port))
    elif a.vllm_colocate:
        fields.update(use_vllm=True, vllm_mode="colocate")
    fields.update(parse_sets(a.sets))
    return fields


def build_trainer(argv: Sequence[str] | None = None):
    """Parse ``argv``; return the :class:`~grpo_lessons.integrations.trl_bridge.GRPOLessonsTrainer` (untrained) and the
    parsed arguments.

    Every process of a launch calls this with the same arguments; TRL and accelerate read the process
    group from the launcher's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...).
    """
    from .trl_bridge import GRPOLessonsTrainer, grpo_config, save_tiny_qwen
    from grpo_lessons.core.variants import get_variant

    a = build_parser().parse_args(argv)
    v = get_variant(a.variant)
    ds, reward_funcs, weights, budget = _dataset_and_rewards(a.task)
    args = grpo_config(v, **grpo_fields(a, weights, budget))
    model = _save_tiny(save_tiny_qwen, Path(a.output_dir)) if a.model == TINY_MODEL else a.model
    return GRPOLessonsTrainer(
        model=model, args=args, reward_funcs=reward_funcs, train_dataset=ds, variant=v,
        loss_impl=a.loss_impl, dynamic_sampling=a.dynamic_sampling, max_sampling_rounds=a.max_sampling_rounds,
    ), a


def main(argv: Sequence[str] | None = None) -> int:
    """Build the trainer, train ``--max-steps`` steps, save the model (process 0 writes) unless ``--no-save``."""
    trainer, a = build_trainer(argv)
    trainer.train()
    if not a.no_save:
        trainer.save_model(a.output_dir)
    if trainer.accelerator.is_main_process:
        last = trainer.state.log_history[-1] if trainer.state.log_history else {}
        print(f"trained {a.variant} for {trainer.state.global_step} steps on "
              f"{trainer.accelerator.num_processes} process(es); last log: {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
