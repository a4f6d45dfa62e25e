"""Call TRL's own ``GRPOTrainer._compute_loss`` on given tensors (the parity oracle).

The trainer is built once per configuration on a tiny offline Qwen2 model; its per-token
log-prob function is replaced by one that returns *our* tensor, so TRL's loss code runs on
exactly the numbers ``policy_loss`` sees, and autograd gives TRL's gradient w.r.t. them.
For the vLLM importance-sampling correction, TRL's own generation step computes the weights from
our sampler log-probs (vLLM's part is a stub; see :func:`trl_sampling_inputs`).
"""

from __future__ import annotations

import functools
import tempfile

import torch

_TMP = tempfile.mkdtemp(prefix="trl-parity-")


@functools.lru_cache(maxsize=None)
def _tiny_model_dir() -> str:
    """Save a tiny Qwen2 + tokenizer to disk: with beta != 0 TRL loads its reference model from a path."""
    from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer

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
             ref_logp: torch.Tensor | None = None, sampling_logp: torch.Tensor | None = None,
             **config) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's loss and its gradient w.r.t. ``logp`` for the ``GRPOConfig`` fields in ``config``.

    ``config`` must contain ``max_completion_length`` (TRL's Dr. GRPO constant).  With
    ``sampling_logp`` (the sampler's log-probs) the batch carries what TRL's vLLM path stores:
    ``sampling_per_token_logps`` and, with ``vllm_importance_sampling_correction=True``, the
    ``importance_sampling_ratio`` TRL's own generation step computes (:func:`trl_sampling_inputs`).
    """
    out = trl_loss_full(logp, old_logp, adv, mask, ref_logp=ref_logp, sampling_logp=sampling_logp, **config)
    return out["loss"], out["grad_logp"]


def trl_loss_full(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                  ref_logp: torch.Tensor | None = None, sampling_logp: torch.Tensor | None = None,
                  entropy: torch.Tensor | None = None, aux_loss: torch.Tensor | None = None,
                  router_aux_loss_coef: float | None = None, accumulation_steps: int = 1,
                  **config) -> dict[str, torch.Tensor]:
    """:func:`trl_loss` with TRL's entropy and MoE aux-loss inputs: its per-token log-probs function returns
    ``entropy`` ``(B, T)`` (default zeros) and ``aux_loss`` (a scalar, with ``router_aux_loss_coef``: TRL's
    ``aux_loss_enabled`` is switched on by hand, the tiny model being no MoE), under ``accumulation_steps``.
    Returns ``loss`` and the gradients ``grad_logp``, ``grad_entropy``, ``grad_aux`` (zeros where unused) and the
    trainer (its metrics and entropy-coefficient state)."""
    extra = {}
    if sampling_logp is not None:
        if config.get("vllm_importance_sampling_correction"):
            extra = trl_sampling_inputs(old_logp, sampling_logp, mask, **config)
        else:
            extra = {"sampling_per_token_logps": sampling_logp.detach().clone()}
    trainer = trl_trainer(**config)
    leaf = logp.detach().clone().requires_grad_(True)
    ent_leaf = (torch.zeros_like(leaf) if entropy is None else entropy.detach().clone()).requires_grad_(True)
    aux_leaf = None if aux_loss is None else aux_loss.detach().clone().requires_grad_(True)
    B, T = leaf.shape

    def fake_logps(model, input_ids, attention_mask, logits_to_keep, **kw):
        assert logits_to_keep == T
        return leaf, ent_leaf, (aux_leaf if kw.get("compute_aux_loss") else None)

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
    if "old_per_token_logps" in extra:  # TRL's padded copy must equal ours where it matters
        assert torch.allclose(extra.pop("old_per_token_logps") * mask, old_logp * mask)
    inputs.update(extra)
    trainer.model.train()
    saved = (trainer.use_vllm, trainer.aux_loss_enabled, trainer.router_aux_loss_coef,
             trainer.current_gradient_accumulation_steps)
    trainer.use_vllm = "importance_sampling_ratio" in inputs  # TRL applies the weights only on its vLLM path
    if aux_leaf is not None:
        trainer.aux_loss_enabled, trainer.router_aux_loss_coef = True, float(router_aux_loss_coef)
    trainer.current_gradient_accumulation_steps = accumulation_steps
    try:
        loss = trainer._compute_loss(trainer.model, inputs)
    finally:
        (trainer.use_vllm, trainer.aux_loss_enabled, trainer.router_aux_loss_coef,
         trainer.current_gradient_accumulation_steps) = saved
    leaves = [leaf, ent_leaf] + ([aux_leaf] if aux_leaf is not None else [])
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]
    return {"loss": loss.detach(), "grad_logp": grads[0], "grad_entropy": grads[1],
            "grad_aux": grads[2] if aux_leaf is not None else None, "trainer": trainer}


def trl_sampling_inputs(old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor,
                        **config) -> dict[str, torch.Tensor]:
    """The batch fields TRL's own generation step derives from the sampler's log-probs.

    Runs TRL's ``_generate_and_score_completions`` with vLLM's role played by a stub: ``_generate``
    returns completions of the lengths in ``mask`` with ``sampling_logp`` as the sampler's per-token
    log-probs, and the trainer's log-prob function returns ``old_logp`` (pi_old).  TRL then pads them
    and computes ``importance_sampling_ratio`` (its TIS/MIS weights for
    ``vllm_importance_sampling_mode``) with its own code.  Returns ``importance_sampling_ratio``,
    ``sampling_per_token_logps`` and ``old_per_token_logps`` as TRL stores them in ``inputs``.
    """
    trainer = trl_trainer(**config)
    B, T = old_logp.shape
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    if max(lengths) != T or min(lengths) < 1:
        raise ValueError("the harness needs a full-length row and no empty row")
    token = 7  # an ordinary token: not EOS, not padding
    assert token not in (*trainer.eos_token_ids, trainer._tokenizer.pad_token_id)

    def fake_generate(prompts):
        ids = [[token] * n for n in lengths]
        logps = [sampling_logp[i, :n].tolist() for i, n in enumerate(lengths)]
        return [[1] for _ in prompts], ids, None, ["x"] * len(prompts), logps, {}, None, None

    def fake_logps(model, input_ids, attention_mask, logits_to_keep, **kw):
        assert logits_to_keep == T
        return old_logp.detach().clone(), None, None

    saved = trainer._generate, trainer._get_per_token_logps_and_entropies, trainer.use_vllm
    trainer._generate, trainer._get_per_token_logps_and_entropies = fake_generate, fake_logps
    trainer.use_vllm = True  # the only switch TRL reads to take its vLLM importance-sampling path
    try:
        trainer.model.train()
        batch = trainer._generate_and_score_completions([{"prompt": "1+1"} for _ in range(B)])
    finally:
        trainer._generate, trainer._get_per_token_logps_and_entropies, trainer.use_vllm = saved
    assert torch.equal(batch["completion_mask"].to(mask.dtype), mask)
    return {k: batch[k] for k in ("importance_sampling_ratio", "sampling_per_token_logps", "old_per_token_logps")
            if k in batch}
