"""Group-relative advantages: the critic-free baseline of GRPO.

Introduced in ``notebooks/02_group_advantages.ipynb``.

Rewards arrive flat, ``(N,)``, with the ``G = group_size`` completions of one prompt
contiguous: ``[p0_c0, p0_c1, ..., p0_c{G-1}, p1_c0, ...]`` (the order TRL uses).  Several reward
functions give a matrix ``(N, K)``, one column per function.

* :func:`group_advantages` — GRPO / Dr. GRPO / ScaleRL scales (notebook 02).
* :func:`decoupled_advantages` — GDPO, each reward normalised in its group before the sum (notebook 15).
* :func:`rank_advantages` — GOPO, advantages from within-group ranks only (notebook 16).
* :func:`leave_one_out_advantages` — RLOO, each reward minus the mean of its group's other rewards.
* :func:`combine_rewards` — TRL's weighted ``nansum`` of a reward matrix (``sum_then_normalize``).
* :func:`grpo_lessons.core.variants.variant_advantages` — the registry's advantage piece for a variant.

Every scale is an entry of :data:`ADVANTAGE_SCALES`; :func:`register_advantage_scale` adds one.

Unscorable completions.  TRL turns a reward function's ``None`` into NaN; a completion for which *every*
function returned ``None`` is left out of its group's mean and std (and the batch std) and gets
advantage exactly 0.  Here that is ``allow_unscored=True`` (NaN rewards in, NaN-aware statistics,
0 out for the NaN rows); the default ``allow_unscored=False`` raises ``ValueError`` on NaN, so a NaN
from a bug is never silently a zero.  :func:`grpo_lessons.core.rewards.reward_matrix` builds the ``(N, K)``
matrix with NaN for ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch

from ._checks import as_float_tensor, check_choice, check_finite
from .registry import Registry

__all__ = [
    "group_advantages", "SCALES", "zero_gradient_probability", "decoupled_advantages", "rank_advantages",
    "combine_rewards", "TIES", "AdvantageScale", "ADVANTAGE_SCALES", "register_advantage_scale",
    "leave_one_out_advantages",
]

Scale = Literal["group", "none", "batch", "batch_centered", "decoupled", "rank", "leave_one_out"]
TIES: tuple[str, ...] = ("average", "first")


@dataclass(frozen=True)
class AdvantageScale:
    """One way rewards become advantages: an entry of :data:`ADVANTAGE_SCALES`.

    ``fn(rewards, group_size, *, allow_unscored=False, **options) -> (N,)`` takes the ``(N,)`` rewards (the
    weighted sum of the reward functions), or with ``per_reward=True`` the ``(N, K)`` reward matrix and
    ``weights=`` (GDPO normalises each reward function apart).  ``options`` names the keyword options of ``fn``
    that :func:`group_advantages` forwards (``eps``, ``unbiased_std``).

    ``trl`` tells the TRL bridge how TRL 1.16's ``GRPOTrainer`` computes these advantages: the ``GRPOConfig``
    fields under which its own advantages *are* these (e.g. ``{"scale_rewards": "group",
    "multi_objective_aggregation": "sum_then_normalize"}``), or ``None`` when no setting gives them, and
    ``GRPOLessonsTrainer`` then replaces TRL's advantages by ``fn``'s.  For a scale with ``trl=None``,
    ``grpo_config`` writes the scale's own name as ``scale_rewards`` (TRL's own trainer refuses it), and
    ``trl_fallback`` holds the nearest TRL setting, the one ``GRPOLessonsTrainer`` runs TRL's scoring and reward
    logs with before it replaces the advantages (TRL's defaults where it is empty).
    """

    name: str
    fn: Callable[..., torch.Tensor]
    trl: Mapping[str, Any] | None
    per_reward: bool = False
    options: tuple[str, ...] = ()
    trl_fallback: Mapping[str, Any] = field(default_factory=dict)
    citation: str = ""

    def __post_init__(self) -> None:
        if self.trl is not None:
            object.__setattr__(self, "trl", MappingProxyType(dict(self.trl)))
        object.__setattr__(self, "trl_fallback", MappingProxyType(dict(self.trl_fallback)))

    @property
    def trl_scale_rewards(self) -> str | None:
        """The ``scale_rewards`` TRL computes these advantages with (``None``: TRL cannot; the bridge recomputes)."""
        return None if self.trl is None else self.trl.get("scale_rewards")


#: Advantage scales by name: how rewards become advantages (a variant's ``advantage_scale``).
ADVANTAGE_SCALES: Registry[AdvantageScale] = Registry("advantage scale")
#: The same registry under its older name (``name in SCALES``, ``sorted(SCALES)`` keep working).
SCALES = ADVANTAGE_SCALES

_REQUIRED: Any = object()


def register_advantage_scale(name: str, fn: Callable[..., torch.Tensor], *, trl: Mapping[str, Any] | None = _REQUIRED,
                             per_reward: bool = False, options: tuple[str, ...] = (),
                             trl_fallback: Mapping[str, Any] | None = None, citation: str = "",
                             replace: bool = False) -> AdvantageScale:
    """Add an advantage scale to :data:`ADVANTAGE_SCALES` (see :class:`AdvantageScale` for ``fn``'s contract).

    ``trl`` is required: the ``GRPOConfig`` fields with which TRL computes exactly these advantages, or ``None``
    when it cannot (the TRL bridge then recomputes them with ``fn``).  A wrong claim here is what the
    registry-wide bridge test catches: the advantages handed to TRL's loss would differ from ``fn``'s.
    """
    if trl is _REQUIRED:
        raise TypeError(f"register_advantage_scale({name!r}): say how TRL computes it: trl={{GRPOConfig fields under "
                        "which TRL's own advantages are these}}, or trl=None (TRL cannot; the bridge recomputes them)")
    if not callable(fn):
        raise TypeError(f"advantage scale {name!r}: fn must be callable, got {type(fn).__name__}")
    entry = AdvantageScale(name, fn, trl, per_reward=per_reward, options=tuple(options),
                           trl_fallback=dict(trl_fallback or {}), citation=citation)
    return ADVANTAGE_SCALES.add(name, entry, replace=replace)


def _std(x: torch.Tensor, dim: int | None, unbiased: bool) -> torch.Tensor:
    if dim is None:
        return x.std(correction=1 if unbiased else 0)
    return x.std(dim=dim, keepdim=True, correction=1 if unbiased else 0)


def _check_group_size(n: int, group_size: int) -> None:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if n == 0:
        raise ValueError("rewards is empty: there is no group to compute advantages for")
    if n % group_size != 0:
        raise ValueError(
            f"{n} rewards cannot be split into groups of {group_size}: N must be a multiple of group_size"
        )


def _check_rewards_values(r: torch.Tensor, allow_unscored: bool, name: str = "rewards") -> None:
    if not allow_unscored:
        check_finite(r, name)
    elif bool(torch.isinf(r).any()):
        raise ValueError(f"{name} contains inf at positions {(torch.isinf(r)).nonzero().flatten().tolist()[:8]}; "
                         "only NaN (unscorable) is allowed with allow_unscored=True")


def _nanstd(x: torch.Tensor, dim: int | None, unbiased: bool = True) -> torch.Tensor:
    """Std ignoring NaN (TRL's ``nanstd``): Bessel over the valid count, NaN where fewer than 2 (1) values."""
    valid = ~torch.isnan(x)
    count = valid.sum() if dim is None else valid.sum(dim=dim, keepdim=True)
    mean = torch.nanmean(x) if dim is None else torch.nanmean(x, dim=dim, keepdim=True)
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros_like(x))
    ss = sq.sum() if dim is None else sq.sum(dim=dim, keepdim=True)
    denom = (count - 1) if unbiased else count
    return torch.where(denom > 0, (ss / denom.clamp(min=1)).sqrt(), torch.full_like(ss, float("nan")))


def _constant_groups(g: torch.Tensor, dim: int) -> torch.Tensor:
    """True where every valid (non-NaN) value along ``dim`` is equal (keepdim)."""
    valid = ~torch.isnan(g)
    hi = torch.where(valid, g, torch.full_like(g, -float("inf"))).amax(dim=dim, keepdim=True)
    lo = torch.where(valid, g, torch.full_like(g, float("inf"))).amin(dim=dim, keepdim=True)
    return hi == lo


def group_advantages(
    rewards,
    group_size: int,
    scale: Scale = "group",
    eps: float = 1e-4,
    unbiased_std: bool = True,
    *,
    allow_unscored: bool = False,
) -> torch.Tensor:
    """Advantages ``(N,) -> (N,)`` from rewards of contiguous groups of ``group_size``.

    * ``scale="group"`` — GRPO (Shao et al. 2024, arXiv 2402.03300, Sec. 4.1.2):
      ``A_i = (r_i - mean_g) / (std_g + eps)``.  TRL ``scale_rewards="group"``; veRL ``grpo``.
    * ``scale="none"`` — Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): ``A_i = r_i - mean_g``.
      TRL ``scale_rewards="none"``; veRL ``norm_adv_by_std_in_grpo=False``.
    * ``scale="batch"`` — TRL ``scale_rewards="batch"``: group mean, then the std of the **raw**
      rewards over the batch, ``A_i = (r_i - mean_g) / (std(r) + eps)``.
    * ``scale="batch_centered"`` — ScaleRL's batch-level advantage normalisation (Khatri et al. 2025,
      arXiv 2510.13786, Sec. 3.2): group mean, then the std of the **centred** advantages over the
      batch, ``A_i = (r_i - mean_g) / (std({r_j - mean_g(j)}) + eps)``.  The two differ whenever
      group means differ: rewards ``[1,0,0,0 | 1,1,1,1 | 0,1,1,0]`` give ``A_0 = 1.45623`` under
      ``"batch"`` (std 0.514929) and ``1.87988`` under ``"batch_centered"`` (std 0.398862).
      TRL has no setting for it; :class:`grpo_lessons.integrations.trl_bridge.GRPOLessonsTrainer` computes
      it in place of TRL's advantages.
    * ``scale="decoupled"`` — GDPO with one reward: :func:`decoupled_advantages` on ``(N, 1)``.
    * ``scale="rank"`` — GOPO: :func:`rank_advantages` (average ranks for ties).
    * ``scale="leave_one_out"`` — RLOO: :func:`leave_one_out_advantages`.
    * any other name registered with :func:`register_advantage_scale`.

    Std convention: Bessel-corrected (``n - 1``) by default, plus ``eps = 1e-4`` outside the
    square root — exactly TRL's.  veRL uses the same unbiased std with ``eps = 1e-6``.
    A group whose rewards are all equal gets advantages of exactly ``0.0`` (no gradient),
    whatever the rounding of its mean.

    ``allow_unscored=True``: NaN rewards mark unscorable completions (TRL: every reward function
    returned ``None``); they are left out of the group mean/std and the batch std and get advantage 0,
    as TRL 1.16 does.  A group with one scored completion gives it 0 too (its std is undefined).

    Raises ``ValueError`` for an unknown ``scale``, if ``N`` is not a multiple of ``group_size``, if any reward
    is NaN (unless ``allow_unscored``) or inf (the positions are named), or if a standard deviation is needed
    from fewer than 2 values.
    """
    r = as_float_tensor(rewards, "rewards")
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(r.shape)}")
    entry = ADVANTAGE_SCALES.lookup(scale, "scale")
    _check_group_size(r.numel(), group_size)
    _check_rewards_values(r, allow_unscored)
    given = {"eps": eps, "unbiased_std": unbiased_std}
    options = {k: given[k] for k in entry.options if k in given}
    if entry.per_reward:  # one reward function: the (N, 1) matrix
        return entry.fn(r.unsqueeze(1), group_size, allow_unscored=allow_unscored, **options)
    return entry.fn(r, group_size, allow_unscored=allow_unscored, **options)


def _centred_groups(r: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(g, r - mean_g)``, both ``(N / G, G)``: NaN-aware group means, exact zeros in an all-equal group."""
    g = r.view(-1, group_size)  # (num_prompts, G)
    centred = g - torch.nanmean(g, dim=1, keepdim=True)  # (num_prompts, G); NaN rows stay NaN
    constant = _constant_groups(g, dim=1)  # (num_prompts, 1)
    return g, torch.where(constant, torch.zeros_like(centred), centred)  # exact zeros, not 1e-9 noise


def _flat(adv: torch.Tensor, allow_unscored: bool) -> torch.Tensor:
    adv = adv.reshape(-1)  # (N,)
    if allow_unscored:
        adv = torch.nan_to_num(adv, nan=0.0)  # unscorable rows (and lone scored rows) carry no signal
    return adv


def _group_scale(r, group_size, *, allow_unscored=False, eps=1e-4, unbiased_std=True) -> torch.Tensor:
    if group_size < 2:
        raise ValueError("scale='group' needs group_size >= 2: the std of a single reward is undefined")
    g, centred = _centred_groups(r, group_size)
    return _flat(centred / (_nanstd(g, dim=1, unbiased=unbiased_std) + eps), allow_unscored)


def _no_scale(r, group_size, *, allow_unscored=False) -> torch.Tensor:
    return _flat(_centred_groups(r, group_size)[1], allow_unscored)


def _batch_scale(r, group_size, *, allow_unscored=False, eps=1e-4, unbiased_std=True) -> torch.Tensor:
    if r.numel() < 2:
        raise ValueError("scale='batch' needs at least 2 rewards in the batch for a std")
    _, centred = _centred_groups(r, group_size)
    return _flat(centred / (_nanstd(r, dim=None, unbiased=unbiased_std) + eps), allow_unscored)


def _batch_centered_scale(r, group_size, *, allow_unscored=False, eps=1e-4, unbiased_std=True) -> torch.Tensor:
    if r.numel() < 2:
        raise ValueError("scale='batch' needs at least 2 rewards in the batch for a std")
    _, centred = _centred_groups(r, group_size)
    return _flat(centred / (_nanstd(centred.reshape(-1), dim=None, unbiased=unbiased_std) + eps), allow_unscored)


def combine_rewards(rewards, weights=None, *, allow_unscored: bool = True) -> torch.Tensor:
    """Weighted sum of a reward matrix ``(N, K) -> (N,)``, TRL's ``sum_then_normalize`` first step.

    ``r_i = nansum_k w_k R_ik``: a NaN entry (that function returned ``None``) counts as absent; a row
    that is NaN in *every* column stays NaN (unscorable, see the module docstring).  ``weights`` default
    to 1 (TRL ``reward_weights``).  A 1-D ``(N,)`` input is one column.
    """
    R = _reward_matrix_tensor(rewards, allow_unscored)
    w = _weights(weights, R.shape[1], R)
    total = (R * w.unsqueeze(0)).nansum(dim=1)  # (N,)
    return torch.where(torch.isnan(R).all(dim=1), torch.full_like(total, float("nan")), total)


def _reward_matrix_tensor(rewards, allow_nan: bool) -> torch.Tensor:
    R = as_float_tensor(rewards, "rewards")
    if R.dim() == 1:
        R = R.unsqueeze(1)
    if R.dim() != 2:
        raise ValueError(f"rewards must be (N, K) (one column per reward function) or (N,), got {tuple(R.shape)}")
    if R.shape[0] == 0 or R.shape[1] == 0:
        raise ValueError(f"rewards is empty, shape {tuple(R.shape)}")
    _check_rewards_values(R, allow_nan)
    return R


def _weights(weights, k: int, like: torch.Tensor) -> torch.Tensor:
    if weights is None:
        return torch.ones(k, dtype=like.dtype, device=like.device)
    w = as_float_tensor(weights, "weights").to(dtype=like.dtype, device=like.device).reshape(-1)
    if w.numel() != k:
        raise ValueError(f"{w.numel()} weights for {k} reward columns")
    check_finite(w, "weights")
    return w


GDPOConvention = Literal["trl", "authors"]


def decoupled_advantages(
    rewards,
    group_size: int,
    weights=None,
    eps: float = 1e-4,
    *,
    convention: GDPOConvention = "trl",
) -> torch.Tensor:
    """GDPO advantages ``(N, K) -> (N,)``: normalise each reward in its group, sum, renormalise over the batch.

    Liu et al. 2026, *GDPO: Group reward-Decoupled normalization Policy Optimization*, arXiv 2601.05242::

        A_k,i = (r_k,i - mean_g(r_k)) / (std_g(r_k) + eps)          # per reward k, per group (Bessel)
        S_i   = sum_k w_k A_k,i
        A_i   = (S_i - mean_batch(S)) / (std_batch(S) + eps)        # Bessel over the whole batch

    ``rewards``: ``(N, K)``, one column per reward function, groups of ``group_size`` contiguous rows
    (a 1-D ``(N,)`` is one column); ``weights``: ``(K,)`` (TRL ``reward_weights``), default 1.
    Shapes: returns ``(N,)``.

    ``convention="trl"`` (default) is exactly TRL 1.16's ``multi_objective_aggregation="normalize_then_sum"``
    (which ignores ``scale_rewards``): NaN-aware throughout — a NaN entry (that function returned
    ``None``) is left out of its column's group mean/std and of the weighted ``nansum``; a row NaN in every
    column is unscorable: out of the batch statistics, advantage 0.  With one reward TRL still
    renormalises over the batch.  A group whose values of reward ``k`` are all equal contributes exactly 0
    for ``k`` (here exact; TRL's float mean may leave ~1e-7 noise).

    ``convention="authors"`` is NVlabs/GDPO's TRL fork: NaN rewards become 0 *before* the statistics
    (an unscorable row then counts as reward 0 everywhere), and with a single reward function it falls
    back to plain GRPO (group z-score, no batch renormalisation).

    Introduced in ``notebooks/15_gdpo.ipynb``; registry variant ``"gdpo"``.  Raises ``ValueError`` for
    shapes, inf rewards, non-finite weights, ``group_size`` not dividing ``N``.
    """
    check_choice(convention, ("trl", "authors"), "convention")
    R = _reward_matrix_tensor(rewards, allow_nan=True)  # (N, K)
    n, k = R.shape
    _check_group_size(n, group_size)
    w = _weights(weights, k, R)  # (K,)
    if convention == "authors":
        R = torch.nan_to_num(R, nan=0.0)
        if k == 1:
            if group_size < 2:
                raise ValueError("the authors' single-reward fallback is GRPO: it needs group_size >= 2")
            return group_advantages(R[:, 0], group_size, scale="group", eps=eps)
    unscorable = torch.isnan(R).all(dim=1)  # (N,)

    g = R.view(-1, group_size, k)  # (M, G, K)
    mean_k = torch.nanmean(g, dim=1, keepdim=True)  # (M, 1, K)
    if group_size > 1:
        std_k = _nanstd(g, dim=1)  # (M, 1, K); NaN where fewer than 2 values were scored
    else:
        std_k = torch.zeros_like(mean_k)  # TRL: no std for G = 1
    z = (g - mean_k) / (std_k + eps)  # (M, G, K)
    z = torch.where(_constant_groups(g, dim=1) & ~torch.isnan(z), torch.zeros_like(z), z)  # exact 0s
    s = (z.reshape(n, k) * w.unsqueeze(0)).nansum(dim=1)  # (N,) weighted sum of per-reward advantages
    s = torch.where(unscorable, torch.full_like(s, float("nan")), s)
    if n > 1:
        std_b = _nanstd(s, dim=None)  # () Bessel over the scored rows
    else:
        std_b = torch.zeros((), dtype=s.dtype)
    adv = (s - torch.nanmean(s)) / (std_b + eps)  # (N,)
    return torch.nan_to_num(adv, nan=0.0)  # unscorable rows: advantage 0


def rank_advantages(
    rewards,
    group_size: int,
    ties: Literal["average", "first"] = "average",
    *,
    allow_unscored: bool = False,
) -> torch.Tensor:
    """GOPO advantages ``(N,) -> (N,)`` from within-group ranks: ``A_i = 2 - 4 (rho_i - 1) / (G - 1)``.

    Choi et al. 2026, *GOPO: Policy Optimization using Ranked Rewards*, arXiv 2602.03876: ``rho_i`` is the
    rank of completion ``i`` in its group (1 = highest reward), so advantages are linear in the rank
    from +2 (best) to -2 (worst), the reward magnitudes are discarded and no mean/std normalisation
    follows.  Any strictly increasing transform of the rewards gives the same advantages.

    Ties: ``ties="average"`` (the default, and why: equal rewards should get equal advantages) gives tied
    completions the mean of the ranks they span (``rho = 1 + #better + (#tied - 1)/2``), so every group's
    advantages sum to 0 and an all-tied group gets exactly 0 (no signal from nothing).  ``ties="first"`` is
    the authors' behaviour made deterministic: every completion gets a distinct rank, ties broken by position
    (earlier = better rank; the authors' non-stable double argsort breaks them in whatever order the sort
    produces), so an all-tied group still gets the full ±2 spread.  The authors' loss is the clipped
    surrogate with a token mean over each micro-batch; the registry's ``gopo`` variant uses the batch token
    mean (``aggregation="token_mean"``).

    ``allow_unscored=True``: NaN rows are left out of the ranking (``G`` becomes the number of scored
    completions) and get advantage 0; a group with fewer than 2 scored completions gets 0.

    Not in TRL or veRL: ``GRPOLessonsTrainer`` (variant ``"gopo"``) recomputes TRL's advantages with this.
    Introduced in ``notebooks/16_gopo.ipynb``.  Raises ``ValueError`` for ``G < 2`` (the formula divides
    by ``G - 1``), shapes, NaN (unless ``allow_unscored``) or inf, an unknown ``ties``.
    """
    r = as_float_tensor(rewards, "rewards")
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(r.shape)}")
    check_choice(ties, TIES, "ties")
    _check_group_size(r.numel(), group_size)
    if group_size < 2:
        raise ValueError("GOPO needs group_size >= 2: A = 2 - 4 (rho - 1) / (G - 1) divides by G - 1 = 0")
    _check_rewards_values(r, allow_unscored)
    g = r.view(-1, group_size).to(torch.float64)  # (M, G)
    valid = ~torch.isnan(g)  # (M, G)
    mine, theirs = g.unsqueeze(2), g.unsqueeze(1)  # (M, G, 1), (M, 1, G): [m, i, j] compares j to i
    better = (theirs > mine).sum(dim=2).to(g.dtype)  # (M, G) how many scored completions beat i (NaN never compares)
    tied = (theirs == mine) & ~torch.eye(group_size, dtype=torch.bool).unsqueeze(0)  # (M, G, G), j != i
    if ties == "average":
        rho = 1.0 + better + tied.sum(dim=2).to(g.dtype) / 2.0  # (M, G)
    else:
        earlier = torch.ones(group_size, group_size, dtype=torch.bool).tril(-1).unsqueeze(0)  # j < i
        rho = 1.0 + better + (tied & earlier).sum(dim=2).to(g.dtype)  # (M, G)
    n_scored = valid.sum(dim=1, keepdim=True).to(g.dtype)  # (M, 1)
    adv = 2.0 - 4.0 * (rho - 1.0) / (n_scored - 1).clamp(min=1)  # (M, G)
    adv = torch.where(valid & (n_scored >= 2), adv, torch.zeros_like(adv))
    return adv.reshape(-1).to(r.dtype)  # (N,)


def zero_gradient_probability(p: float, group_size: int) -> float:
    """Chance that a group of ``G`` Bernoulli(p) rewards is all-equal: ``p**G + (1-p)**G``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1], got {p}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return p**group_size + (1.0 - p) ** group_size


def leave_one_out_advantages(rewards, group_size: int, *, allow_unscored: bool = False) -> torch.Tensor:
    """RLOO advantages ``(N,) -> (N,)``: each reward minus the mean of the *other* rewards of its group.

    Ahmadian et al. 2024, *Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
    Feedback in LLMs*, arXiv 2402.14740 (Sec. 3, RLOO)::

        A_i = r_i - 1/(G - 1) sum_{j != i} r_j  =  G/(G - 1) (r_i - mean_g)

    No std division: the baseline of each sample leaves that sample out, so it is independent of it and the
    estimate stays unbiased.  A group whose rewards are all equal gets exactly 0.
    TRL 1.16 ``RLOOTrainer`` (``normalize_advantages=False``, its default) computes the same numbers only with
    ``beta = 0`` (its default is 0.05): with ``beta > 0`` it first subtracts ``beta`` times each completion's summed
    per-token ``log pi_old - log pi_ref`` from its reward (the KL as a reward penalty, RLOO's paper), so its
    advantages are those of the penalised rewards, while GRPO-style trainers here add the KL to the loss instead.
    veRL ``adv_estimator="rloo"``.  TRL's ``GRPOTrainer`` has no setting for it: ``GRPOLessonsTrainer`` computes it.

    ``allow_unscored=True``: NaN rows (unscorable) are left out of their group's baseline, ``G`` becomes the
    number of scored completions, and they get advantage 0, as does a group with fewer than 2 scored
    completions (TRL's ``RLOOTrainer`` does the same).  Raises ``ValueError`` for ``G < 2`` (nothing to leave
    out to), shapes, NaN (unless ``allow_unscored``) or inf.
    """
    r = as_float_tensor(rewards, "rewards")
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(r.shape)}")
    _check_group_size(r.numel(), group_size)
    if group_size < 2:
        raise ValueError("leave-one-out needs group_size >= 2: a group of one has no other completion for a baseline")
    _check_rewards_values(r, allow_unscored)
    g = r.view(-1, group_size)  # (M, G)
    scored = (~torch.isnan(g)).sum(dim=1, keepdim=True)  # (M, 1) completions with a reward
    baseline = (g.nansum(dim=1, keepdim=True) - g) / (scored - 1)  # (M, G) mean of the other scored rewards
    adv = g - baseline  # (M, G)
    adv = torch.where(_constant_groups(g, dim=1) | (scored < 2), torch.zeros_like(adv), adv)  # exact 0: no signal
    return _flat(adv, allow_unscored)


def _decoupled_scale(R, group_size, *, weights=None, allow_unscored=False, eps=1e-4) -> torch.Tensor:
    return decoupled_advantages(R, group_size, weights, eps=eps)  # NaN-aware per column whatever allow_unscored


def _rank_scale(r, group_size, *, allow_unscored=False) -> torch.Tensor:
    return rank_advantages(r, group_size, allow_unscored=allow_unscored)


# -- the registered scales ------------------------------------------------------------------------------
# trl: the GRPOConfig fields under which TRL 1.16's GRPOTrainer computes exactly these advantages (None: it cannot).
_SUM_FIRST = {"multi_objective_aggregation": "sum_then_normalize"}
_ZSCORE = ("eps", "unbiased_std")
register_advantage_scale("group", _group_scale, trl={**_SUM_FIRST, "scale_rewards": "group"}, options=_ZSCORE,
                         citation="Shao et al. 2024, DeepSeekMath, arXiv 2402.03300")
register_advantage_scale("none", _no_scale, trl={**_SUM_FIRST, "scale_rewards": "none"},
                         citation="Liu et al. 2025, Dr. GRPO, arXiv 2503.20783")
register_advantage_scale("batch", _batch_scale, trl={**_SUM_FIRST, "scale_rewards": "batch"}, options=_ZSCORE,
                         citation="TRL scale_rewards='batch'")
register_advantage_scale("batch_centered", _batch_centered_scale, trl=None, options=_ZSCORE,
                         trl_fallback={"scale_rewards": "none"},  # TRL logs r - mean_g, the numerator
                         citation="Khatri et al. 2025, ScaleRL, arXiv 2510.13786")
register_advantage_scale("decoupled", _decoupled_scale, trl={"multi_objective_aggregation": "normalize_then_sum"},
                         per_reward=True, options=("eps",), citation="Liu et al. 2026, GDPO, arXiv 2601.05242")
register_advantage_scale("rank", _rank_scale, trl=None, citation="Choi et al. 2026, GOPO, arXiv 2602.03876")
register_advantage_scale("leave_one_out", leave_one_out_advantages, trl=None,
                         trl_fallback={"scale_rewards": "none"},  # TRL logs r - mean_g = (G-1)/G of RLOO's
                         citation="Ahmadian et al. 2024, Back to Basics (RLOO), arXiv 2402.14740")
