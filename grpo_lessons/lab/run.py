"""Training and probing an exact tabular policy with the package's own losses.

:func:`train` runs GRPO-family updates on a :class:`~grpo_lessons.lab.policy.TabularPolicy`: each step samples a
group of ``G`` completions per prompt, scores them with a lab reward (:data:`LAB_REWARDS`), turns the rewards into
advantages with :func:`grpo_lessons.core.variants.variant_advantages` and takes ``num_iterations`` passes of
:func:`grpo_lessons.core.losses.policy_loss` over the batch, all by variant name: the lab does not copy a loss, it
tests the package's.  After every step it records the exact metrics of :func:`~grpo_lessons.lab.policy.exact_metrics`
and what the update did (share of tokens with zero gradient, clipped share, completions sampled).

:func:`probe` samples many batches from the *starting* policy and measures what one batch's update would be:
advantage statistics and the gradient's distance to the on-policy gradient (how much a sampler mismatch biases it).

Randomness: step ``t`` of seed ``s`` draws from a generator seeded by ``(s, t)``, so two arms of one seed sample the
same completions until their policies differ (common random numbers), and a run's numbers depend only on its seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.registry import Registry
from grpo_lessons.core.shaping import soft_overlong_penalty
from grpo_lessons.core.variants import Variant, get_variant, variant_advantages

from .policy import Batch, LabTask, TabularPolicy, exact_metrics, make_task, sample, token_entropy, token_logp

__all__ = ["LabConfig", "LabRun", "train", "probe", "one_thread", "LAB_REWARDS", "register_lab_reward", "resolve_variant",
           "STEP_DOCS", "PROBE_DOCS"]


# ---------------------------------------------------------------------------------------------------------------
# rewards: a registry, each entry (task, batch, config, generator) -> (B,) or (B, K) rewards
# ---------------------------------------------------------------------------------------------------------------

RewardFn = Callable[[LabTask, Batch, "LabConfig", torch.Generator], torch.Tensor]

#: Lab rewards by name (``register_lab_reward`` adds one).
LAB_REWARDS: Registry[RewardFn] = Registry("lab reward")


def register_lab_reward(name: str, fn: RewardFn, *, replace: bool = False) -> RewardFn:
    """Add a lab reward ``fn(task, batch, config, generator) -> (B,) or (B, K) rewards``."""
    if not callable(fn):
        raise TypeError(f"a lab reward must be callable, got {type(fn).__name__}")
    return LAB_REWARDS.add(name, fn, replace=replace)


def _true_quality(task: LabTask, batch: Batch, cfg: "LabConfig") -> torch.Tensor:
    q = task.quality[batch.prompts, batch.answers]  # (B,)
    if cfg.truncated_scores_zero:  # a truncated completion never reached its final answer
        q = torch.where(batch.truncated, torch.zeros_like(q), q)
    return q


def _correct(task, batch, cfg, g):
    """1 for a right answer, else 0 (a truncated completion scores 0 when ``truncated_scores_zero``)."""
    return (_true_quality(task, batch, cfg) > 0.5).to(torch.float64)


def _quality(task, batch, cfg, g):
    """The answer's true quality in [0, 1] (a graded task's partial credit)."""
    return _true_quality(task, batch, cfg)


def _reward_model(task, batch, cfg, g):
    """A reward model's score: ``exp(distortion * quality)`` (a monotone, heavy-tailed distortion of the true quality)
    times lognormal noise of log-sd ``reward_noise``; 0 noise keeps the order of the true qualities."""
    q = _true_quality(task, batch, cfg)
    score = torch.exp(cfg.reward_distortion * q)
    if cfg.reward_noise > 0:
        score = score * torch.exp(cfg.reward_noise * torch.randn(q.shape, generator=g, dtype=torch.float64))
    return score


def _typical(task, batch, cfg, g):
    """Right answer (0/1) plus ``typicality_bias * log pi_start(answer)``: a reward that also prefers what the
    starting policy found typical (the typicality bias of preference data, Zhang et al. 2025, arXiv 2510.01171)."""
    lp = torch.log_softmax(task.answer_logits, -1)[batch.prompts, batch.answers]  # (B,)
    return _correct(task, batch, cfg, g) + cfg.typicality_bias * lp


def _correct_and_brief(task, batch, cfg, g):
    """Two rewards, ``(B, 2)``: right answer (0/1) and brevity (1 when the completion has at most ``brief_len``
    tokens), for GDPO."""
    right = _correct(task, batch, cfg, g)
    brief = (batch.lengths <= cfg.brief_len).to(torch.float64)
    return torch.stack([right, brief], 1)


for _name, _fn in (("correct", _correct), ("quality", _quality), ("reward_model", _reward_model),
                   ("correct_and_brief", _correct_and_brief), ("typical", _typical)):
    register_lab_reward(_name, _fn)


# ---------------------------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LabConfig:
    """One arm of a lab experiment.  ``variant`` names a registry variant; ``pieces`` replaces some of its pieces
    (``{"aggregation": "token_mean"}``: the same method with one piece changed) and ``loss_options`` are passed to
    :func:`~grpo_lessons.core.losses.policy_loss` as they are (``epsilon``, ``epsilon_high``, ``tau_pos``, ...)."""

    variant: str = "grpo"
    pieces: Mapping[str, str] = field(default_factory=dict)
    loss_options: Mapping[str, Any] = field(default_factory=dict)
    task: Mapping[str, Any] = field(default_factory=dict)  # make_task keyword arguments
    group_size: int = 8
    prompts_per_step: int | None = None  # None: every prompt of the task each step
    steps: int = 200
    max_completions: int | None = None  # stop once this many completions were sampled (an equal-sample budget)
    lr: float = 0.05
    optimizer: str = "adam"  # or "sgd"
    num_iterations: int = 1  # optimiser passes over each sampled batch (TRL's num_iterations, mu)
    minibatches: int = 1  # optimiser steps per pass (TRL's steps_per_generation)
    beta: float = 0.0
    entropy_coef: float = 0.0
    reward: str = "correct"
    reward_weights: tuple[float, ...] | None = None
    reward_distortion: float = 1.0
    reward_noise: float = 0.0
    brief_len: int = 4
    typicality_bias: float = 0.0  # alpha of the "typical" reward
    truncated_scores_zero: bool = False
    overlong_cache: int | None = None  # DAPO's soft overlong penalty over the last N tokens before max_len
    mask_truncated: bool = False  # DAPO's overlong filtering
    dynamic_sampling: bool = False  # DAPO: drop all-equal groups and refill
    max_rounds: int = 8
    sampler_shift: float = 0.0  # the sampler's logits = the trainer's + sampler_shift * Z (Z fixed for the run)
    rollout_correction: str | None = None
    rollout_clip_max: float | None = 3.0
    rollout_clip_min: float | None = None

    def replace(self, **changes) -> "LabConfig":
        return dataclasses.replace(self, **changes)


def resolve_variant(cfg: LabConfig) -> Variant:
    """The registry variant of ``cfg`` with ``cfg.pieces`` replaced (checked against the piece registries)."""
    v = get_variant(cfg.variant)
    if not cfg.pieces:
        return v
    unknown = set(cfg.pieces) - {"advantage_scale", "ratio_level", "objective", "aggregation"}
    if unknown:
        raise ValueError(f"pieces must name advantage_scale, ratio_level, objective or aggregation; got {sorted(unknown)}")
    tag = ",".join(f"{k}={val}" for k, val in sorted(cfg.pieces.items()))
    # trl=None: what TRL can compute is read off the new pieces (the registered fields describe the old ones)
    return dataclasses.replace(v, name=f"{v.name}[{tag}]", trl=None, **dict(cfg.pieces))


def _check(cfg: LabConfig, task: LabTask) -> None:
    if cfg.group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group needs a baseline), got {cfg.group_size}")
    if cfg.steps < 1 or cfg.num_iterations < 1 or cfg.minibatches < 1:
        raise ValueError("steps, num_iterations and minibatches must be >= 1")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"lr must be a positive number, got {cfg.lr}")
    if cfg.optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {cfg.optimizer!r}")
    n = cfg.prompts_per_step or task.n_prompts
    if not 1 <= n <= task.n_prompts:
        raise ValueError(f"prompts_per_step must be in [1, {task.n_prompts}], got {cfg.prompts_per_step}")
    if (n * cfg.group_size) % cfg.minibatches:
        raise ValueError(f"minibatches ({cfg.minibatches}) must divide the batch ({n} x {cfg.group_size})")
    LAB_REWARDS.lookup(cfg.reward, "reward")
    if cfg.rollout_correction is not None and cfg.sampler_shift == 0.0:
        raise ValueError("rollout_correction needs a sampler that differs from the trainer (sampler_shift > 0)")


# ---------------------------------------------------------------------------------------------------------------
# one step's pieces
# ---------------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with one torch thread, then restore the caller's setting.  The lab's tensors are tiny: a second
    thread only adds synchronisation (on a busy 2-core machine, tens of times slower), and one thread everywhere
    makes a run's numbers the same wherever it runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """The generator of step ``step`` of seed ``seed`` (``stream`` separates independent uses within a step)."""
    return torch.Generator().manual_seed((int(seed) * 1_000_003 + int(step) * 7_919 + int(stream) * 104_729) % 2**62)


def _sampler_shift(cfg: LabConfig, seed: int, task: LabTask) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The fixed offsets ``sampler_shift * Z`` of the sampler's logits for this seed (None: no mismatch)."""
    if not cfg.sampler_shift:
        return None
    gz = _generator(seed, 0, stream=9)
    return (cfg.sampler_shift * torch.randn(task.answer_logits.shape, generator=gz, dtype=torch.float64),
            cfg.sampler_shift * torch.randn(task.body_logits.shape, generator=gz, dtype=torch.float64))


def _sampler_tables(pol: TabularPolicy, shift: tuple[torch.Tensor, torch.Tensor] | None):
    a, b = pol.frozen()
    if shift is None:
        return a, b
    return a + shift[0], b + shift[1]


def _draw(task: LabTask, tables, prompts: torch.Tensor, G: int, g: torch.Generator) -> Batch:
    rows = prompts.repeat_interleave(G)  # (B,) groups are contiguous
    u = torch.rand(rows.shape[0], task.max_len, generator=g, dtype=torch.float64)  # (B, L)
    return sample(tables[0], tables[1], rows, u)


def _rewards(task: LabTask, batch: Batch, cfg: LabConfig, g: torch.Generator) -> torch.Tensor:
    r = LAB_REWARDS[cfg.reward](task, batch, cfg, g)  # (B,) or (B, K)
    if cfg.overlong_cache is not None:
        pen = soft_overlong_penalty(batch.lengths.to(torch.float64), task.max_len, int(cfg.overlong_cache))
        r = r + pen if r.dim() == 1 else torch.cat([r[:, :1] + pen[:, None], r[:, 1:]], 1)
    if not bool(torch.isfinite(r).all()):
        raise ValueError(f"lab reward {cfg.reward!r} returned a non-finite value")
    return r


def _informative(r: torch.Tensor, G: int) -> torch.Tensor:
    """``(n_groups,)`` bool: groups whose rewards are not all equal (on any column)."""
    g = r.reshape(-1, G, *r.shape[1:])
    return (g.amax(1) != g.amin(1)).reshape(g.shape[0], -1).any(-1)


def _sample_batch(task, tables, cfg: LabConfig, prompts: torch.Tensor, g: torch.Generator):
    """One step's batch and rewards; with dynamic sampling, drop all-equal groups and refill from new draws of the
    same prompts (DAPO's drop-and-refill) for up to ``max_rounds`` rounds.  Returns the batch, its rewards, the number
    of completions sampled and the share of informative groups among those sampled in the first round."""
    G = cfg.group_size
    batch = _draw(task, tables, prompts, G, g)
    r = _rewards(task, batch, cfg, g)
    inf0 = _informative(r, G)
    sampled = batch.lengths.numel()
    if not cfg.dynamic_sampling:
        return batch, r, sampled, float(inf0.to(torch.float64).mean())
    need = prompts.numel()
    keep_b, keep_r = [], []
    got, inf = 0, inf0
    for rnd in range(cfg.max_rounds):
        if rnd > 0:
            batch = _draw(task, tables, prompts, G, g)
            r = _rewards(task, batch, cfg, g)
            sampled += batch.lengths.numel()
            inf = _informative(r, G)
        idx = inf.nonzero().flatten()[: need - got]
        if idx.numel():
            rows = (idx[:, None] * G + torch.arange(G)).flatten()
            keep_b.append(batch.select(rows))
            keep_r.append(r[rows])
            got += idx.numel()
        if got >= need:
            break
    if got == 0:  # nothing informative in any round: train on the last draw (all advantages are 0)
        return batch, r, sampled, float(inf0.to(torch.float64).mean())
    return Batch.cat(keep_b), torch.cat(keep_r), sampled, float(inf0.to(torch.float64).mean())


def _advantages(r: torch.Tensor, cfg: LabConfig, v: Variant) -> torch.Tensor:
    w = None if cfg.reward_weights is None else list(cfg.reward_weights)
    return variant_advantages(r, cfg.group_size, v, weights=w).to(torch.float64)


def _loss(pol: TabularPolicy, batch: Batch, rows: torch.Tensor, adv: torch.Tensor, old_logp, slp, ref_logp,
          cfg: LabConfig, v: Variant, mask: torch.Tensor):
    """One minibatch's :func:`policy_loss` and the ``(b, L)`` leaf-free log-probs it was taken on."""
    sub = batch.select(rows)
    logp = token_logp(pol.answer_logits, pol.body_logits, sub)  # (b, L) with grad
    logp.retain_grad()
    ent = token_entropy(pol.answer_logits, pol.body_logits, sub) if cfg.entropy_coef else None
    out = policy_loss(
        logp, old_logp[rows], adv[rows], mask[rows], variant=v, beta=cfg.beta,
        ref_logp=None if ref_logp is None else ref_logp[rows], max_completion_length=pol.task.max_len,
        sampling_logp=None if slp is None else slp[rows], rollout_correction=cfg.rollout_correction,
        rollout_clip_max=cfg.rollout_clip_max, rollout_clip_min=cfg.rollout_clip_min,
        group_size=cfg.group_size, entropy=ent, entropy_coef=cfg.entropy_coef, **dict(cfg.loss_options))
    return out, logp


STEP_DOCS: dict[str, str] = {
    "zero_grad_share": "share of completion tokens with a non-zero advantage whose loss gradient is exactly 0 "
                       "(clipped or masked), over every pass of the step",
    "clip_frac": "clipped share that policy_loss reports (0 where the objective has no clip), mean over passes",
    "completions_sampled": "completions sampled this step (dynamic sampling samples more)",
    "informative_share": "share of the step's first-round groups whose rewards are not all equal",
    "ratio_spread": "standard deviation of the token log-ratio log(pi / pi_old) on the last pass (a stale batch's "
                    "ratio noise)",
}


def _step_metrics(stats: list[dict]) -> dict[str, float]:
    out = {}
    for k in ("zero_grad_share", "clip_frac"):
        out[k] = sum(s[k] for s in stats) / len(stats)
    out["ratio_spread"] = stats[-1]["ratio_spread"]
    return out


@dataclass
class LabRun:
    """What :func:`train` returns: the config, the seed, and one dict per step (``history[0]`` is the start)."""

    config: LabConfig
    seed: int
    history: list[dict[str, float]]

    def series(self, key: str) -> list[float]:
        return [h.get(key, float("nan")) for h in self.history]

    def final(self, key: str) -> float:
        return self.history[-1][key]

    def mean(self, key: str) -> float:
        """Mean of a step metric over the training steps (``history[1:]``)."""
        xs = [h[key] for h in self.history[1:] if key in h and not math.isnan(h[key])]
        return sum(xs) / len(xs) if xs else float("nan")


def train(cfg: LabConfig, seed: int = 0, *, task: LabTask | None = None) -> LabRun:
    """Train a tabular policy on ``cfg`` with seed ``seed`` (on one torch thread); see the module docstring."""
    with one_thread():
        return _train(cfg, seed, task)


def _train(cfg: LabConfig, seed: int, task: LabTask | None) -> LabRun:
    task = task or make_task(**dict(cfg.task))
    _check(cfg, task)
    v = resolve_variant(cfg)
    torch.manual_seed(int(seed))  # nothing below draws from the global generator; this only pins stray use
    pol = TabularPolicy(task)
    params = list(pol.parameters())
    opt = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD(params, lr=cfg.lr))
    shift = _sampler_shift(cfg, seed, task)
    ref = (task.answer_logits.clone(), task.body_logits.clone()) if cfg.beta else None
    n_prompts = cfg.prompts_per_step or task.n_prompts
    history = [{"step": 0.0, "completions": 0.0, **exact_metrics(pol.answer_logits, pol.body_logits, task)}]
    total = 0
    for step in range(1, cfg.steps + 1):
        if cfg.max_completions is not None and total >= cfg.max_completions:
            break
        g = _generator(seed, step)
        if n_prompts == task.n_prompts:
            prompts = torch.arange(task.n_prompts)
        else:
            prompts = torch.randperm(task.n_prompts, generator=g)[:n_prompts]
        old = pol.frozen()
        smp = _sampler_tables(pol, shift)
        batch, r, sampled, informative = _sample_batch(task, smp, cfg, prompts, g)
        total += sampled
        adv = _advantages(r, cfg, v)  # (B,)
        mask = batch.mask.clone()
        if cfg.mask_truncated:
            mask = mask * (~batch.truncated).to(mask.dtype)[:, None]
        with torch.no_grad():
            old_logp = token_logp(old[0], old[1], batch)
            slp = token_logp(smp[0], smp[1], batch) if shift is not None else None
            ref_logp = token_logp(ref[0], ref[1], batch) if ref is not None else None
        B = batch.lengths.numel()
        stats = []
        for _ in range(cfg.num_iterations):
            perm = torch.arange(B)
            for rows in perm.chunk(cfg.minibatches):
                out, logp = _loss(pol, batch, rows, adv, old_logp, slp, ref_logp, cfg, v, mask)
                opt.zero_grad()
                out.loss.backward()
                opt.step()
                m = mask[rows] * (adv[rows] != 0).to(mask.dtype)[:, None]
                zero = ((logp.grad == 0).to(mask.dtype) * m).sum() / m.sum().clamp(min=1.0)
                lr_ = (logp.detach() - old_logp[rows])[mask[rows] > 0]
                stats.append({"zero_grad_share": float(zero), "clip_frac": float(out.clip_frac or 0.0),
                              "ratio_spread": float(lr_.std()) if lr_.numel() > 1 else 0.0})
        row = {"step": float(step), "completions": float(total), "completions_sampled": float(sampled),
               "informative_share": informative, **_step_metrics(stats),
               **exact_metrics(pol.answer_logits, pol.body_logits, task)}
        history.append(row)
    return LabRun(cfg, int(seed), history)


# ---------------------------------------------------------------------------------------------------------------
# probing the starting policy: advantage statistics and the bias of one batch's gradient
# ---------------------------------------------------------------------------------------------------------------

PROBE_DOCS: dict[str, str] = {
    "grad_bias": "|mean gradient - on-policy mean gradient| / |on-policy mean gradient| over the probe's batches "
                 "(answer and body tables; the on-policy reference from independent draws of the trainer's policy). "
                 "Finite batches leave a Monte-Carlo floor (about 0.25 with 48 batches on the default task, even with "
                 "no mismatch): compare arms by their paired difference, not by the level",
    "extreme_weight": "mean |A| on prompts whose pass rate is below 0.15 or above 0.85, divided by mean |A| on "
                      "prompts with a pass rate in [0.3, 0.7] (groups with a gradient only)",
    "distinct_advantages": "distinct advantage values per informative group, mean over groups",
    "adv_abs": "mean |A| over completions of informative groups",
}


def _grad(pol: TabularPolicy, batch, adv, old_logp, slp, cfg, v, mask) -> torch.Tensor:
    out, _ = _loss(pol, batch, torch.arange(batch.lengths.numel()), adv, old_logp, slp, None, cfg, v, mask)
    ga, gb = torch.autograd.grad(out.loss, [pol.answer_logits, pol.body_logits])
    return torch.cat([ga.flatten(), gb.flatten()])


def probe(cfg: LabConfig, seed: int = 0, *, batches: int = 64, task: LabTask | None = None) -> dict[str, float]:
    """Sample ``batches`` batches from the starting policy (through the sampler when ``sampler_shift > 0``) and
    measure :data:`PROBE_DOCS` without updating anything (on one torch thread)."""
    with one_thread():
        return _probe(cfg, seed, batches, task)


def _probe(cfg: LabConfig, seed: int, batches: int, task: LabTask | None) -> dict[str, float]:
    task = task or make_task(**dict(cfg.task))
    _check(cfg, task)
    v = resolve_variant(cfg)
    pol = TabularPolicy(task)
    rates = task.start_pass_rates()
    extreme = (rates < 0.15) | (rates > 0.85)
    mid = (rates >= 0.3) & (rates <= 0.7)
    shift = _sampler_shift(cfg, seed, task)
    old = pol.frozen()
    smp = _sampler_tables(pol, shift)
    n_prompts = cfg.prompts_per_step or task.n_prompts
    G = cfg.group_size
    g_arm, g_ref = [], []
    ext, mids, distinct, absadv = [], [], [], []
    for k in range(batches):
        g = _generator(seed, k + 1)
        prompts = (torch.arange(task.n_prompts) if n_prompts == task.n_prompts
                   else torch.randperm(task.n_prompts, generator=g)[:n_prompts])
        batch, r, _, _ = _sample_batch(task, smp, cfg, prompts, g)
        adv = _advantages(r, cfg, v)
        mask = batch.mask * ((~batch.truncated).to(torch.float64)[:, None] if cfg.mask_truncated else 1.0)
        with torch.no_grad():
            old_logp = token_logp(old[0], old[1], batch)
            slp = token_logp(smp[0], smp[1], batch) if shift is not None else None
        g_arm.append(_grad(pol, batch, adv, old_logp, slp, cfg, v, mask))
        if shift is not None:  # the on-policy reference: independent draws from the trainer's own policy
            gr = _generator(seed, k + 1, stream=5)
            rb, rr, _, _ = _sample_batch(task, old, cfg.replace(dynamic_sampling=False), prompts, gr)
            radv = _advantages(rr, cfg, v)
            with torch.no_grad():
                rlogp = token_logp(old[0], old[1], rb)
            ref_cfg = cfg.replace(rollout_correction=None)
            g_ref.append(_grad(pol, rb, radv, rlogp, None, ref_cfg, v, rb.mask))
        a = adv.reshape(-1, G).abs()  # (n, G)
        inf = _informative(r, G)
        p = batch.prompts.reshape(-1, G)[:, 0]
        for j in range(a.shape[0]):
            if not bool(inf[j]):
                continue
            mean_abs = float(a[j].mean())
            absadv.append(mean_abs)
            distinct.append(float(torch.unique(adv.reshape(-1, G)[j].round(decimals=9)).numel()))
            if bool(extreme[p[j]]):
                ext.append(mean_abs)
            elif bool(mid[p[j]]):
                mids.append(mean_abs)
    out = {
        "extreme_weight": (sum(ext) / len(ext)) / (sum(mids) / len(mids)) if ext and mids else float("nan"),
        "distinct_advantages": sum(distinct) / len(distinct) if distinct else float("nan"),
        "adv_abs": sum(absadv) / len(absadv) if absadv else float("nan"),
        "grad_bias": float("nan"),
    }
    if g_ref:
        ma, mr = torch.stack(g_arm).mean(0), torch.stack(g_ref).mean(0)
        out["grad_bias"] = float((ma - mr).norm() / mr.norm().clamp(min=1e-300))
    return out
