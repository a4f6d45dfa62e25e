"""Call TRL's own ``GRPOTrainer._compute_loss`` on given tensors (the parity oracle).

The trainer is built once per configuration on a tiny offline Qwen2 model; its per-token
log-prob function is replaced by one that returns *our* tensor, so TRL's loss code runs on
exactly the numbers ``policy_loss`` sees, and autograd gives TRL's gradient w.r.t. them.
"""

from __future__ import annotations

import functools
import tempfile

import torch

_TMP = tempfile.mkdtemp(prefix="trl-parity-")


@functools.lru_cache(maxsize=None)
def _tiny_model_dir() -> str:
    """Save a tiny Qwen2 + tokenizer to disk: with beta != 0 TRL loads its reference model from a path."""
    from grpo_lessons.models import tiny_qwen, tiny_tokenizer

    tok = tiny_tokenizer()
    path = f"{_TMP}/tiny-qwen2"
    tiny_qwen(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@functools.lru_cache(maxsize=64)
def trl_trainer(**config):
    """A ``GRPOTrainer`` whose ``GRPOConfig`` has the given fields (cached per configuration)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from transformers import AutoTokenizer

    path = _tiny_model_dir()
    args = GRPOConfig(
        output_dir=_TMP, report_to="none", use_cpu=True, bf16=False,
        per_device_train_batch_size=4, num_generations=2, **config,
    )
    trainer = GRPOTrainer(
        model=path, args=args, processing_class=AutoTokenizer.from_pretrained(path), train_dataset=Dataset.from_dict({"prompt": ["1+1"] * 4}),
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _config_key(**config):
    return tuple(sorted(config.items()))


def trl_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
             ref_logp: torch.Tensor | None = None, **config) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's loss and its gradient w.r.t. ``logp`` for the ``GRPOConfig`` fields in ``config``.

    ``config`` must contain ``max_completion_length`` (TRL's Dr. GRPO constant).
    """
    trainer = trl_trainer(**config)
    leaf = logp.detach().clone().requires_grad_(True)
    B, T = leaf.shape

    def fake_logps(model, input_ids, attention_mask, logits_to_keep, **kw):
        assert logits_to_keep == T
        return leaf, torch.zeros_like(leaf), None

    trainer._get_per_token_logps_and_entropies = fake_logps
    inputs = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask.to(torch.long),
        "advantages": adv.detach().clone(),
        "old_per_token_logps": old_logp.detach().clone(),
        "num_items_in_batch": mask.sum(),
    }
    if ref_logp is not None:
        inputs["ref_per_token_logps"] = ref_logp.detach().clone()
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad
