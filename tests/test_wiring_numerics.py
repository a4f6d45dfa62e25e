"""Wiring between the pieces, checked on numbers: master weights in every precision, evaluation with its own group
size inside TRL, the off-policy mask on tokens the sampler could not score, TRL's metric names carrying TRL's values
(one process and a simulated second one), and the smaller settings a run used to accept and then fail on.

Every TRL comparison calls TRL's own ``GRPOTrainer`` on the same tensors: the two trainers are built from one saved
tiny Qwen2 and one ``GRPOConfig``, one batch comes from TRL's own generation step, and both ``_compute_loss`` run on it.
"""

from __future__ import annotations

import math

import pytest
import torch

from grpo_lessons.core.advantages import leave_one_out_advantages
from grpo_lessons.core.aggregation import prompt_weights
from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer
from grpo_lessons.training.train_config import TrainConfig
from grpo_lessons.training.trainer import Trainer
from test_trainer import ROWS, cfg, digits

# --------------------------------------------------------------------------------------------------------------------
# fp32 master weights in every precision
# --------------------------------------------------------------------------------------------------------------------


def changed_share(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    n = sum(a.numel() for a in before)
    return sum(int((a.float() != b.float()).sum()) for a, b in zip(before, after)) / n


@pytest.mark.parametrize("precision", ["fp32", "auto"])
def test_a_bf16_model_gets_fp32_master_weights_in_every_precision(tmp_path, precision):
    """A model that arrives in bf16 is stepped in fp32 whatever the precision: one update at lr 3e-5 changes the same
    weights, to the bit, as for the same weights arriving in fp32 (in bf16 most of each step rounds away)."""
    tok = tiny_tokenizer()
    shares, masters = {}, {}
    for loaded in (torch.bfloat16, torch.float32):
        model = tiny_qwen(tok, dtype=torch.bfloat16).to(loaded)  # bf16's weights, held in bf16 or in fp32
        tr = Trainer(cfg(tmp_path, f"{precision}-{loaded}", eval_size=0, precision=precision, lr=3e-5, steps=1),
                     model=model, tokenizer=tok, train_rows=ROWS, reward_funcs=[digits])
        assert all(p.dtype == torch.float32 for g in tr.optimizer.param_groups for p in g["params"])
        before = [p.detach().clone() for p in tr.params]
        tr.step()
        shares[loaded] = changed_share(before, [p.detach() for p in tr.params])
        masters[loaded] = torch.cat([p.detach().float().flatten() for p in tr.params])
    print(f"precision={precision}: share of weights one update changed {shares}")
    assert shares[torch.bfloat16] > 0.9, shares
    assert torch.equal(masters[torch.bfloat16], masters[torch.float32])


# --------------------------------------------------------------------------------------------------------------------
# TRL: shared set-up
# --------------------------------------------------------------------------------------------------------------------

trl = pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer, grpo_config  # noqa: E402
from trl_harness import _tiny_model_dir  # noqa: E402

TOL = 1e-6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, tok = _tiny_model_dir(), tiny_tokenizer()  # the harness's copy on disk, saved once per process
    prompts = [[{"role": "user", "content": f"What is {i}+{i + 1}?"}] for i in range(16)]
    ds = Dataset.from_dict({"prompt": prompts})
    return {"path": str(path), "tok": tok, "ds": ds, "out": str(tmp_path_factory.mktemp("out"))}


def text_reward(completions, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(sum(map(ord, t)) % 11) for t in texts]


BASE = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=8, report_to="none",
            use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", seed=0, gradient_checkpointing=False)


def build(cls, tiny, args, **kw):
    t = cls(model=tiny["path"], args=args, reward_funcs=[text_reward], train_dataset=tiny["ds"],
            processing_class=tiny["tok"], **kw)
    t.model.train()
    t.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    return t


def pair(tiny, **fields):
    """TRL's trainer and the subclass on the same weights and the same plain ``GRPOConfig``."""
    args = GRPOConfig(output_dir=tiny["out"], **{**BASE, **fields})
    return build(GRPOTrainer, tiny, args), build(GRPOLessonsTrainer, tiny, args)


def trl_batch(trainer, seed: int) -> dict:
    """TRL's own generation batch, then unequal lengths, ``pi_old`` off by ~0.3 nats and random advantages."""
    G = trainer.num_generations
    rows = [trainer.train_dataset[i] for i in range(4 // G) for _ in range(G)]
    torch.manual_seed(seed)
    batch = trainer._generate_and_score_completions(rows)
    g = torch.Generator().manual_seed(seed)
    B, T = batch["completion_ids"].shape
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    batch["completion_mask"], batch["num_items_in_batch"] = mask, mask.sum()
    batch["advantages"] = torch.randn(B, generator=g)
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], mask], 1)
        lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, T)
    batch["old_per_token_logps"] = lp + 0.3 * torch.randn(B, T, generator=g)
    if trainer.beta != 0.0:
        batch["ref_per_token_logps"] = lp + 0.2 * torch.randn(B, T, generator=g)
    return batch


def loss_metrics(trainer, batch) -> tuple[float, dict[str, float]]:
    """The loss of ``_compute_loss`` and the metrics it logged (nothing else in the log)."""
    trainer._metrics["train"].clear()
    loss = trainer._compute_loss(trainer.model, batch)
    return float(loss.detach()), {k: v[-1] for k, v in trainer._metrics["train"].items()}


# --------------------------------------------------------------------------------------------------------------------
# Evaluation with its own group size, for every variant
# --------------------------------------------------------------------------------------------------------------------


def eval_batch(trainer, n_prompts: int) -> dict:
    trainer.model.eval()
    G = trainer.num_generations_eval
    rows = [trainer.train_dataset[i] for i in range(n_prompts) for _ in range(G)]
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(rows)


@pytest.mark.parametrize("variant", ["rloo", "gopo", "scalerl", "gdpo", "grpo"])
def test_one_generation_per_eval_prompt_gives_zero_advantages_as_trl(variant, tiny):
    args = grpo_config(variant, output_dir=tiny["out"], **{**BASE, "num_generations": 2, "num_generations_eval": 1,
                                                            "per_device_eval_batch_size": 2})
    ours = build(GRPOLessonsTrainer, tiny, args, variant=variant)
    batch = eval_batch(ours, 2)
    assert torch.equal(batch["advantages"], torch.zeros(2)), batch["advantages"]
    loss = ours._compute_loss(ours.model, batch)  # the eval loss computes (TRL's prediction_step)
    assert math.isfinite(float(loss))


def test_rloo_evaluates_end_to_end_with_one_generation(tiny):
    args = grpo_config("rloo", output_dir=tiny["out"], **{**BASE, "num_generations": 2, "num_generations_eval": 1,
                                                           "per_device_eval_batch_size": 2})
    ours = GRPOLessonsTrainer(model=tiny["path"], args=args, reward_funcs=[text_reward], train_dataset=tiny["ds"],
                              eval_dataset=tiny["ds"].select(range(2)), processing_class=tiny["tok"], variant="rloo")
    out = ours.evaluate()
    assert out["eval_loss"] == 0.0  # zero advantages, beta = 0


@pytest.mark.parametrize("G_eval", [3, 4])
def test_scalerl_eval_prompt_weights_use_the_eval_group_size(tiny, G_eval):
    args = grpo_config("scalerl", output_dir=tiny["out"], **{**BASE, "num_generations": 2,
                                                              "num_generations_eval": G_eval,
                                                              "per_device_eval_batch_size": 2 * G_eval})
    ours = build(GRPOLessonsTrainer, tiny, args, variant="scalerl")
    batch = eval_batch(ours, 2)  # the generation step computes the weights (G_eval = 3 raised here)
    B, T = batch["completion_ids"].shape
    lengths = torch.arange(B) % T + 1  # (B,) unequal lengths: groups of 2 and of 4 get different weights
    batch["completion_mask"] = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    batch = ours._batch_fields(batch)  # the weights again, from these lengths
    expected = prompt_weights(batch["completion_mask"], G_eval).to(batch["prompt_weights"].dtype)
    assert torch.allclose(batch["prompt_weights"], expected), (batch["prompt_weights"], expected)
    assert math.isfinite(float(ours._compute_loss(ours.model, batch)))


# --------------------------------------------------------------------------------------------------------------------
# The off-policy mask on tokens the sampler could not score
# --------------------------------------------------------------------------------------------------------------------


def test_off_policy_mask_reads_unscored_sampler_tokens_as_trl(tiny):
    """Tokens vLLM could not score carry NaN: TRL counts them as KL 0 in the off-policy mask.  Here the policy has
    drifted from pi_old by 1 nat on those tokens (and not at all elsewhere): TRL keeps the negative-advantage
    sequences, and so must the subclass."""
    native, ours = pair(tiny, loss_type="dapo", off_policy_mask_threshold=0.1, num_iterations=2)
    batch = trl_batch(native, seed=6)
    B, T = batch["completion_ids"].shape
    mask = batch["completion_mask"]
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], mask], 1)
        lp, _, _ = native._get_per_token_logps_and_entropies(native.model, ids, att, T)
    batch["advantages"] = torch.tensor([1.0, -1.0, -0.5, -2.0])
    batch["old_per_token_logps"] = lp + 1.0  # pi_old 1 nat above pi_theta on every token
    sampling = lp.clone()  # the sampler agrees with pi_theta where it scored ...
    sampling[1:, :] = float("nan")  # ... and scored no token of the negative-advantage rows
    batch["sampling_per_token_logps"] = sampling
    for t in (native, ours):
        t.use_vllm, t.vllm_importance_sampling_correction = True, False
    l_nat, m_nat = loss_metrics(native, batch)
    l_our, m_our = loss_metrics(ours, batch)
    print(f"loss: TRL {l_nat:+.5f}, subclass {l_our:+.5f}")
    assert abs(l_nat - l_our) < TOL, (l_nat, l_our)
    assert m_our["off_policy/off_policy_masked_frac"] == 0.0


def test_policy_loss_reads_unscored_sampler_tokens_as_trl_in_every_consumer():
    """One call with NaN sampler log-probs: rollout correction weight 1 there (TRL), no KL evidence in the mask (TRL),
    the same loss as with those tokens filled by their TRL-neutral values."""
    from grpo_lessons.core.losses import policy_loss

    g = torch.Generator().manual_seed(0)
    logp = -1.0 - torch.rand(3, 4, generator=g)
    old = logp + 0.8
    samp = old + 0.1 * torch.randn(3, 4, generator=g)
    samp[1, 1:] = float("nan")
    mask = torch.ones(3, 4)
    adv = torch.tensor([0.5, -1.0, -1.0])
    kw = dict(variant="dapo", rollout_correction="token_truncate", off_policy_mask_threshold=0.3)
    out = policy_loss(logp, old, adv, mask, sampling_logp=samp, allow_unscored_tokens=True, **kw)
    nan = samp.isnan()
    # weights: the NaN tokens' own pi_old (rho = 1); the mask: pi_theta (KL 0) -- two calls, one per consumer
    by_weight = policy_loss(logp, old, adv, mask, sampling_logp=torch.where(nan, old, samp), **kw)
    by_mask = policy_loss(logp, old, adv, mask, sampling_logp=torch.where(nan, logp, samp), **kw)
    assert out.is_weight_mean == pytest.approx(by_weight.is_weight_mean)
    # row 1's one scored token drifted 0.8: mean 0.2 over its 4 tokens, kept; row 2 drifted 0.8 everywhere, dropped
    assert out.off_policy_masked_frac == by_mask.off_policy_masked_frac == pytest.approx(1 / 3)
    assert by_weight.off_policy_masked_frac == pytest.approx(2 / 3)  # NaN read as pi_old: row 1's drift counts
    with pytest.raises(ValueError, match="sampling_logp contains NaN"):
        policy_loss(logp, old, adv, mask, sampling_logp=samp, **kw)


# --------------------------------------------------------------------------------------------------------------------
# Metrics under TRL's names carry TRL's values: one parity test per name
# --------------------------------------------------------------------------------------------------------------------

METRIC_CASES = {
    "token,beta": dict(loss_type="grpo", beta=0.04),
    "sequence": dict(loss_type="grpo", importance_sampling_level="sequence", beta=0.04, epsilon=0.03),
    "cispo": dict(loss_type="cispo", epsilon_high=1.1),
    "vespo": dict(loss_type="vespo"),
    "entropy_bonus": dict(loss_type="dapo", entropy_coef=0.1),
}
METRIC_NAMES = [
    ("token,beta", "kl"), ("token,beta", "entropy"),
    *[("token,beta", f"clip_ratio/{k}") for k in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")],
    *[("sequence", f"clip_ratio/{k}") for k in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")],
    ("cispo", "cispo_clip_ratio"), ("vespo", "vespo/phi_seq_mean"),
    ("entropy_bonus", "policy_loss"), ("entropy_bonus", "entropy_coef"),
]


@pytest.fixture(scope="module")
def metric_runs(tiny):
    """Per case: TRL's loss and metrics, the subclass's, on one process."""
    runs = {}
    for case, fields in METRIC_CASES.items():
        native, ours = pair(tiny, **fields)
        batch = trl_batch(native, seed=3)
        runs[case] = (loss_metrics(native, batch), loss_metrics(ours, batch))
    return runs


@pytest.mark.parametrize("case,name", METRIC_NAMES, ids=[f"{c}:{n}" for c, n in METRIC_NAMES])
def test_each_trl_metric_name_holds_trls_value(metric_runs, case, name):
    (l_nat, m_nat), (l_our, m_our) = metric_runs[case]
    assert abs(l_nat - l_our) < TOL
    assert name in m_nat, f"TRL logs no {name!r} in case {case!r}: {sorted(m_nat)}"
    assert name in m_our, f"the subclass logs no {name!r}: {sorted(m_our)}"
    assert m_our[name] == pytest.approx(m_nat[name], abs=TOL), (name, m_nat[name], m_our[name])


@pytest.mark.parametrize("case", list(METRIC_CASES))
def test_no_trl_metric_name_holds_another_value(metric_runs, case):
    """Every name the subclass logs that TRL also logs in some case holds TRL's value; none is missing."""
    trl_names = {n for (_, m_nat), _ in metric_runs.values() for n in m_nat}
    (_, m_nat), (_, m_our) = metric_runs[case]
    assert set(m_nat) <= set(m_our), set(m_nat) - set(m_our)
    for name in set(m_our) & trl_names - {"policy_loss"}:  # TRL logs policy_loss only with the entropy bonus
        assert name in m_nat, f"{name!r} logged under a TRL name TRL does not log here"


def test_a_cispo_objective_logs_its_clip_share_under_trls_cispo_name(tiny):
    """ScaleRL's loss is CISPO's objective: its share of capped tokens is TRL's cispo_clip_ratio, never clip_ratio/*."""
    args = grpo_config("scalerl", output_dir=tiny["out"], **{**BASE, "epsilon_high": 1.1})
    ours = build(GRPOLessonsTrainer, tiny, args, variant="scalerl")
    _, m = loss_metrics(ours, trl_batch(ours, seed=3))
    assert "cispo_clip_ratio" in m and not any(k.startswith("clip_ratio/") for k in m), sorted(m)


class SecondRank:
    """This process as rank 0 of two: what the other rank contributes to each ``reduce`` / ``gather`` is replayed from
    a recording of the same code on another batch (``record=True`` records instead, as rank 1)."""

    def __init__(self, acc, record: bool, tape: list | None = None):
        self._acc, self.record, self.tape, self.i = acc, record, [] if tape is None else tape, 0

    num_processes = 2

    @property
    def process_index(self):
        return 1 if self.record else 0

    def _other(self, t):
        if self.record:
            self.tape.append(t.detach().clone())
            return None
        other = self.tape[self.i]
        self.i += 1
        return other

    def reduce(self, t, reduction="sum"):
        other = self._other(t)
        return t if other is None else t + other

    def gather(self, t):
        other = self._other(t)
        t = t.reshape(1) if t.dim() == 0 else t
        return t if other is None else torch.cat([t, other.reshape(t.shape[:0] + (-1,) + t.shape[1:])])

    def __getattr__(self, name):
        return getattr(self._acc, name)


def two_rank_metrics(trainer, batches) -> dict[str, float]:
    """The metrics ``trainer`` logs as rank 0 of two processes holding ``batches[0]`` and ``batches[1]``."""
    acc = trainer.accelerator
    try:
        rank1 = SecondRank(acc, record=True)
        trainer.accelerator = rank1
        loss_metrics(trainer, batches[1])
        trainer.accelerator = SecondRank(acc, record=False, tape=rank1.tape)
        return loss_metrics(trainer, batches[0])[1]
    finally:
        trainer.accelerator = acc


@pytest.mark.parametrize("case", ["token,beta", "sequence"])
def test_metrics_reduce_over_processes_as_trl(tiny, case):
    """entropy, kl and clip_ratio/* are sums and counts reduced over every process (TRL), not a mean of each process's
    mean: the two ranks hold different numbers of tokens."""
    native, ours = pair(tiny, **METRIC_CASES[case])
    batches = [trl_batch(native, seed=3), trl_batch(native, seed=11)]
    batches[1]["completion_mask"][:, 2:] = 0  # rank 1: far fewer tokens
    batches[1]["num_items_in_batch"] = batches[1]["completion_mask"].sum()
    m_nat, m_our = two_rank_metrics(native, batches), two_rank_metrics(ours, batches)
    for name in ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                 "clip_ratio/low_min", "clip_ratio/high_max"):
        assert m_our[name] == pytest.approx(m_nat[name], abs=TOL), (name, m_nat[name], m_our[name])


# --------------------------------------------------------------------------------------------------------------------
# Smaller items
# --------------------------------------------------------------------------------------------------------------------


def test_an_unknown_rollout_correction_fails_validation():
    with pytest.raises(ValueError, match="token_truncate"):
        TrainConfig(rollout_correction="token_trunc").validate()


def test_harmless_generation_config_fields_do_not_stop_sampling():
    """``max_new_tokens``, ``max_time`` and ``cache_implementation="static"`` in a model's generation_config change
    nothing the sampler draws: the same seed draws the same tokens as a blank config, at the requested length."""
    from transformers import GenerationConfig

    from grpo_lessons.training.rollout import generate_completions

    tok = tiny_tokenizer()
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], "Hi"]
    blank = tiny_qwen(tok)
    blank.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    hub = tiny_qwen(tok)
    fields = dict(max_new_tokens=3, max_time=30.0, cache_implementation="static")
    for k, v in fields.items():
        setattr(hub.generation_config, k, v)
    for share in (True, False):
        a = generate_completions(hub, tok, prompts, 2, max_new_tokens=7, temperature=1.0, share_prompt=share,
                                 generator_seed=3)
        b = generate_completions(blank, tok, prompts, 2, max_new_tokens=7, temperature=1.0, share_prompt=share,
                                 generator_seed=3)
        assert torch.equal(a.completion_ids, b.completion_ids) and a.completion_ids.shape[1] == 7
        assert torch.allclose(a.sampling_logps, b.sampling_logps, atol=1e-5)
    assert {k: getattr(hub.generation_config, k) for k in fields} == fields  # read, never changed
    m = tiny_qwen(tok)
    m.generation_config.suppress_tokens = [5]
    with pytest.raises(ValueError, match="suppress_tokens") as err:
        generate_completions(m, tok, prompts, 2, max_new_tokens=4)
    assert "= None" not in str(err.value), str(err.value)  # no instruction to edit the config it promises to leave


def test_leave_one_out_docstring_qualifies_the_rloo_trainer_equivalence():
    doc = " ".join(leave_one_out_advantages.__doc__.split())
    assert "RLOOTrainer" in doc and "beta = 0" in doc, doc
    # the numbers it claims for beta = 0: G/(G-1) (r_i - mean_g)
    r = torch.tensor([1.0, 0.0, 0.5, 2.0])
    assert torch.allclose(leave_one_out_advantages(r, 4), 4 / 3 * (r - r.mean()))
