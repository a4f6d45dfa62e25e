"""grpo_lessons: verified GRPO-family losses, advantages and rewards, and the curriculum's helpers.

    from grpo_lessons import group_advantages, kl_estimate, policy_loss
    adv  = group_advantages(rewards, group_size=8)                 # (N,) -> (N,)
    out  = policy_loss(logp, old_logp, adv, mask, variant="dapo")  # out.loss.backward()

Every variant is an entry of :data:`grpo_lessons.core.variants.VARIANTS`.
"""

from .core.advantages import (
    combine_rewards,
    decoupled_advantages,
    group_advantages,
    rank_advantages,
    zero_gradient_probability,
)
from .core.correction import off_policy_sequence_mask, rollout_weights
from .core.divergence import topk_divergence
from .core.kl import exact_kl, kl_estimate
from .core.losses import LossOutput, policy_loss
from .core.variants import VARIANTS, Variant, get_variant, list_variants, register, variant_advantages

__version__ = "0.1.0"

__all__ = [
    "group_advantages",
    "decoupled_advantages",
    "rank_advantages",
    "combine_rewards",
    "variant_advantages",
    "zero_gradient_probability",
    "kl_estimate",
    "rollout_weights",
    "off_policy_sequence_mask",
    "topk_divergence",
    "exact_kl",
    "policy_loss",
    "LossOutput",
    "VARIANTS",
    "Variant",
    "get_variant",
    "list_variants",
    "register",
    "__version__",
]
