"""Trainer-side features of the off-policy and rewards chapters, on tiny Qwen models: every registered variant
trains by name, the entropy bonus (in the reward / in the loss), ScaleRL's retirement of solved prompts,
DPPO's top-K divergence from the sampler's records, ScaleRL's prompt-level normaliser under micro-batches,
GDPO's reward matrix and unscorable completions."""

import math

import pytest
import torch

from grpo_lessons import group_advantages, policy_loss
from grpo_lessons.core.aggregation import aggregate
from grpo_lessons.training.cli import build_parser, config_from_args, main
from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer
from grpo_lessons.training.records import PromptStream
from grpo_lessons.training.rollout import generate_completions, rollout_logps
from grpo_lessons.core.shaping import completion_entropy, solved_groups, token_entropy
from grpo_lessons.training.trainer import TrainConfig, Trainer, batch_loss, load_history, train
from grpo_lessons.core.variants import VARIANTS, list_variants

ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b, "kind": "hard"}
        for a in range(3) for b in range(4)]


def idsum(completion_ids, **kw):
    """A reward with variance on a random model: the completion's token ids summed, mod 97, in [0, 1)."""
    return [(sum(ids) % 97) / 97 for ids in completion_ids]


def distinct(completion_ids, **kw):
    """A second reward: the share of distinct tokens."""
    return [len(set(ids)) / max(1, len(ids)) for ids in completion_ids]


def constant(completions, **kw):
    """Every completion equally good: all advantages are 0."""
    return [1.0] * len(completions)


def cfg(tmp_path, name="run", **kw):
    base = dict(model="tiny-qwen2", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=4, lr=1e-3,
                eval_size=0, out=str(tmp_path / name), seed=0, beta=0.0, micro_batch_size=8)
    base.update(kw)
    return TrainConfig(**base)


def trainer(c, **kw):
    kw.setdefault("train_rows", ROWS)
    kw.setdefault("reward_funcs", [idsum, distinct])
    return Trainer(c, **kw)


# ---------------------------------------------------------------------------------------------
# every registered variant trains by name
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list_variants())
def test_every_registered_variant_trains_one_step(tmp_path, variant):
    v = VARIANTS[variant]
    G = v.fixed_group_size or 4
    c = cfg(tmp_path, variant=variant, group_size=None if v.fixed_group_size else 4, beta=None,
            mask_truncated_completions=False, dynamic_sampling=False)  # a random model never ends within 4 tokens
    tr = trainer(c)
    before = [p.detach().clone() for p in tr.params]
    row = tr.step()
    assert row["groups_trained"] == 2 and row["completions_sampled"] == 2 * G
    assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.params)), "the update changed nothing"


@pytest.mark.parametrize("variant", list_variants())
def test_cli_trains_every_registered_variant_by_name(tmp_path, variant):
    out = tmp_path / variant
    size = [] if VARIANTS[variant].fixed_group_size else ["--group-size", "4"]  # 2-grpo: its own G = 2
    code = main(["train", "--model", "tiny-qwen2", "--variant", variant, "--steps", "1", *size,
                 "--prompts-per-step", "2", "--max-new-tokens", "4", "--eval-size", "0", "--no-progress",
                 "--no-mask-truncated-completions", "--no-dynamic-sampling", "--out", str(out)])
    assert code == 0
    (row,) = load_history(out / "metrics.csv")
    assert row["step"] == 1 and math.isfinite(row["loss"]) and row["entropy"] > 0


def test_cli_flags_reach_the_config():
    args = build_parser().parse_args(["train", "--entropy-bonus", "0.01", "--entropy-in", "loss",
                                      "--retire-solved-at", "0.9", "--topk", "5", "--variant", "dppo_topk_tv"])
    c = config_from_args(args)
    assert (c.entropy_bonus, c.entropy_in, c.retire_solved_at, c.topk) == (0.01, "loss", 0.9, 5)
    d = config_from_args(build_parser().parse_args(["train"]))
    assert (d.entropy_bonus, d.entropy_in, d.retire_solved_at, d.topk) == (0.0, "reward", None, 20)


def test_bad_feature_settings(tmp_path):
    for kw, msg in ((dict(entropy_in="logits"), "entropy_in"), (dict(entropy_bonus=float("nan")), "entropy_bonus"),
                    (dict(retire_solved_at=0.0), "retire_solved_at"), (dict(retire_solved_at=1.5), "retire_solved_at"),
                    (dict(topk=0), "topk")):
        with pytest.raises(ValueError, match=msg):
            cfg(tmp_path, **kw).validate()


# ---------------------------------------------------------------------------------------------
# entropy bonus
# ---------------------------------------------------------------------------------------------


def test_sampler_entropy_is_the_entropy_of_the_tempered_policy(tmp_path):
    """Rollout.sampling_entropy (recorded while sampling) = token_entropy of the training forward's logits / T."""
    tok = tiny_tokenizer()
    model = tiny_qwen(tok).eval()
    torch.manual_seed(0)
    ro = generate_completions(model, tok, [r["prompt"] for r in ROWS[:2]], 3, max_new_tokens=5, temperature=0.7,
                              compute_logps=False)
    with torch.no_grad():
        _, logits = rollout_logps(model, ro, 0.7, return_logits=True)  # (N, T, V) = z / 0.7
        hot = token_entropy(rollout_logps(model, ro, 1.0, return_logits=True)[1])  # at T = 1: a different number
    m = ro.completion_mask.float()
    torch.testing.assert_close(ro.sampling_entropy, token_entropy(logits) * m, atol=2e-4, rtol=1e-4)
    assert float(((hot - token_entropy(logits)).abs() * m).max()) > 1e-2
    # by hand for one position: -sum p log p of softmax(z / T)
    p = torch.softmax(logits[0, 0], -1)
    assert float(ro.sampling_entropy[0, 0]) == pytest.approx(float(-(p * p.log()).sum()), abs=2e-4)


def test_entropy_in_loss_has_its_own_gradient_when_all_rewards_are_equal(tmp_path):
    alpha = 0.5
    tr = trainer(cfg(tmp_path, entropy_bonus=alpha, entropy_in="loss"), reward_funcs=[constant])
    b = tr.sample_batch()
    assert torch.equal(b.advantages, torch.zeros(8))  # no signal from the rewards
    out, _ = batch_loss(tr.model, b.rollout, b.advantages, b.loss_mask, variant="grpo", temperature=0.7,
                        entropy_coef=alpha)
    out.loss.backward()
    g = [p.grad.clone() for p in tr.params]
    assert max(float(x.abs().max()) for x in g) > 0
    # the gradient is exactly that of -alpha * (seq-mean token-mean of the token entropy), GRPO's aggregation
    tr.optimizer.zero_grad(set_to_none=True)
    _, logits = rollout_logps(tr.model, b.rollout, 0.7, return_logits=True)
    ref = -alpha * aggregate(token_entropy(logits), b.loss_mask, "seq_mean_token_mean")
    ref.backward()
    for a, r in zip(g, [p.grad for p in tr.params]):
        torch.testing.assert_close(a, r, atol=1e-6, rtol=1e-4)
    assert out.extras["entropy_term"] == pytest.approx(-float(ref.detach()) / alpha, rel=1e-5)
    # without the bonus the same batch gives no gradient at all
    tr.optimizer.zero_grad(set_to_none=True)
    out0, _ = batch_loss(tr.model, b.rollout, b.advantages, b.loss_mask, variant="grpo", temperature=0.7)
    out0.loss.backward()
    assert all(p.grad is None or float(p.grad.abs().max()) == 0.0 for p in tr.params)
    # the step logs the bonus and the sampler's entropy
    row = tr.update(b)
    assert row["entropy_bonus"] == pytest.approx(alpha * out.extras["entropy_term"], rel=1e-4)


def test_entropy_in_reward_enters_only_through_the_advantages(tmp_path):
    alpha = 0.3
    tr = trainer(cfg(tmp_path, entropy_bonus=alpha, entropy_in="reward"), reward_funcs=[constant])
    b = tr.sample_batch()
    H = completion_entropy(b.rollout.sampling_entropy, b.rollout.completion_mask)  # (N,)
    torch.testing.assert_close(b.rewards, 1.0 + alpha * H)
    torch.testing.assert_close(b.advantages, group_advantages(1.0 + alpha * H, 4))
    assert float(b.advantages.abs().max()) > 0
    # the loss is the plain policy loss with those advantages: no entropy term of its own
    before = [p.detach().clone() for p in tr.params]
    out, _ = batch_loss(tr.model, b.rollout, b.advantages, b.loss_mask, variant="grpo", temperature=0.7)
    out.loss.backward()
    g = [p.grad.clone() for p in tr.params]
    tr.optimizer.zero_grad(set_to_none=True)
    row = tr.update(b)  # the trainer's own update: the same gradient (SGD-free check through the loss value)
    assert row["loss"] == pytest.approx(float(out.loss.detach()), abs=1e-6)
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.params))
    assert max(float(x.abs().max()) for x in g) > 0
    fields = tr._sample_fields(b.stats)
    assert fields["entropy"] == pytest.approx(float(H.mean()), rel=1e-6)
    assert fields["entropy_bonus"] == pytest.approx(alpha * float(H.mean()), rel=1e-6)
    # without the bonus: constant rewards, zero advantages
    b0 = trainer(cfg(tmp_path, "b0"), reward_funcs=[constant]).sample_batch()
    assert torch.equal(b0.advantages, torch.zeros(8))


# ---------------------------------------------------------------------------------------------
# ScaleRL: retire solved prompts
# ---------------------------------------------------------------------------------------------


def easy_or_ids(completion_ids, kind, **kw):
    """1 for every completion of an 'easy' row (solved), else a fraction < 1 (never right)."""
    return [1.0 if k == "easy" else (sum(ids) % 97) / 97 for k, ids in zip(kind, completion_ids)]


EASY_ROWS = [dict(r, kind="easy" if i % 3 == 0 else "hard") for i, r in enumerate(ROWS)]


def test_solved_groups_by_hand():
    c = torch.tensor([1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, float("nan")])
    assert solved_groups(c, 4, 0.75).tolist() == [True, True, False]
    assert solved_groups(c, 4, 0.9).tolist() == [False, True, False]
    with pytest.raises(ValueError):
        solved_groups(c, 4, 0.0)
    s = PromptStream(6, 0)
    s.retire([1, 4])
    taken = s.take(8)
    assert 1 not in taken and 4 not in taken and s.pool_size == 4 and s.state()["retired"] == [1, 4]
    s.retire(range(6))
    with pytest.raises(RuntimeError, match="retired"):
        s.take(1)


def test_retire_solved_prompts_leave_the_pool_and_survive_resume(tmp_path):
    kw = dict(train_rows=EASY_ROWS, reward_funcs=[easy_or_ids])
    full = train(cfg(tmp_path, "full", steps=4, retire_solved_at=0.9, checkpoint_every=2, checkpoint="end"),
                 progress=False, **kw)
    easy = {i for i, r in enumerate(EASY_ROWS) if r["kind"] == "easy"}
    h = full.history
    assert [r["retired"] for r in h][-1] >= 1 and all(r["pool_size"] == 12 - r["retired"] for r in h)
    assert all(a["retired"] <= b["retired"] for a, b in zip(h, h[1:]))

    tr = trainer(cfg(tmp_path, "pieces", steps=4, retire_solved_at=0.9), **kw)
    for _ in range(4):
        before = set(tr.stream.retired)
        taken = []
        orig = tr.stream.take
        tr.stream.take = lambda k, orig=orig: taken.extend(orig(k)) or taken[-k:]
        tr.step()
        tr.stream.take = orig
        assert not (set(taken) & before), "a retired prompt was sampled again"
        assert tr.stream.retired <= easy and {i for i in taken if i in easy} <= tr.stream.retired
    # without the setting the easy prompts come back
    off = trainer(cfg(tmp_path, "off", steps=4), **kw)
    for _ in range(4):
        off.step()
    assert not off.stream.retired and off.history[-1]["retired"] is None

    # resume: a run stopped at step 2 and resumed gives the uninterrupted run's rows and pool
    half = train(cfg(tmp_path, "half", steps=2, retire_solved_at=0.9, checkpoint_every=2, checkpoint="end"),
                 progress=False, **kw)
    assert half.history[-1]["retired"] == h[1]["retired"]
    resumed = Trainer(cfg(tmp_path, "half", steps=4, retire_solved_at=0.9, checkpoint_every=2, resume=True), **kw)
    res = resumed.run(progress=False)
    def strip(history):  # wall times differ between runs
        return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed") and not k.startswith("time_")}
                for r in history]
    assert strip(res.history) == strip(h)
    reloaded = Trainer(cfg(tmp_path, "full", steps=4, retire_solved_at=0.9), **kw)
    assert not reloaded.stream.retired and reloaded.load_checkpoint() == 4
    assert reloaded.stream.retired == resumed.stream.retired and len(resumed.stream.retired) == h[-1]["retired"]


# ---------------------------------------------------------------------------------------------
# DPPO top-K, ScaleRL prompt_mean under micro-batches
# ---------------------------------------------------------------------------------------------


def test_sampler_topk_records_match_the_policy(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_qwen(tok).eval()
    torch.manual_seed(1)
    ro = generate_completions(model, tok, [r["prompt"] for r in ROWS[:2]], 3, max_new_tokens=5, temperature=0.7,
                              compute_logps=False, record_topk=6)
    N, T = ro.completion_ids.shape
    assert ro.sampler_topk_ids.shape == (N, T, 6) and ro.sampler_topk_logps.shape == (N, T, 6)
    with torch.no_grad():
        _, logits = rollout_logps(model, ro, 0.7, return_logits=True)
    ref = torch.log_softmax(logits, -1).topk(6, dim=-1)
    m = ro.completion_mask.bool()
    assert torch.equal(ro.sampler_topk_ids[m], ref.indices[m])
    torch.testing.assert_close(ro.sampler_topk_logps[m], ref.values[m], atol=2e-4, rtol=1e-4)
    # where the drawn token is in the top-K its recorded log-prob is the top-K entry
    hit = (ro.sampler_topk_ids == ro.completion_ids.unsqueeze(-1)) & m.unsqueeze(-1)
    torch.testing.assert_close((ro.sampler_topk_logps * hit).sum(-1)[hit.any(-1)],
                               ro.sampling_logps[hit.any(-1)])
    # without record_topk nothing is kept
    assert generate_completions(model, tok, [ROWS[0]["prompt"]], 2, max_new_tokens=3, temperature=0.7,
                                compute_logps=False).sampler_topk_ids is None


@pytest.mark.parametrize("variant", ["dppo_topk_tv", "dppo_topk_kl"])
def test_trainer_passes_the_topk_divergence_against_its_own_logits(tmp_path, variant):
    tr = trainer(cfg(tmp_path, variant=variant, topk=5))
    b = tr.sample_batch()
    ro = b.rollout
    assert ro.sampler_topk_ids.shape[-1] == 5
    old = tr._logps(tr.model, ro)  # pi_old, before the weights move
    with torch.no_grad():  # move the policy away from the sampler so that the trust region bites
        tr.model.lm_head.weight.mul_(2.5)  # sharper logits: a different distribution (the tiny model is near uniform)
    out, _ = batch_loss(tr.model, ro, b.advantages, b.loss_mask, variant=variant, temperature=0.7, old_logps=old)
    out.loss.backward()
    g = [p.grad.clone() for p in tr.params]
    tr.optimizer.zero_grad(set_to_none=True)
    logp, logits = rollout_logps(tr.model, ro, 0.7, return_logits=True)
    D = topk_divergence(ro.sampler_topk_ids, ro.sampler_topk_logps, logits.detach(), ro.completion_ids,
                        variant.rsplit("_", 1)[1], sampled_logp=ro.sampling_logps)
    delta = VARIANTS[variant].loss_defaults["delta_high"]
    outside = (D > delta) & b.loss_mask.bool()
    assert bool(outside.any())  # the trust region bites: D matters for the loss
    ref = policy_loss(logp, old, b.advantages, b.loss_mask, variant=variant, divergence=D)
    ref.loss.backward()
    assert float(out.loss.detach()) == pytest.approx(float(ref.loss.detach()), abs=1e-6)
    for a, r in zip(g, [p.grad for p in tr.params]):
        torch.testing.assert_close(a, r, atol=1e-6, rtol=1e-4)
    # the binary variants need no top-K: nothing is recorded
    assert trainer(cfg(tmp_path, "bin", variant="dppo_binary_tv")).sample_batch().rollout.sampler_topk_ids is None


@pytest.mark.parametrize("variant", ["scalerl", "cispo", "dppo_topk_tv", "gdpo"])
def test_micro_batches_add_up_for_the_new_variants(tmp_path, variant):
    tok = tiny_tokenizer()
    params = []
    for mb in (4, 8):  # one group per micro-batch vs the whole batch
        model = tiny_qwen(tok)
        tr = trainer(cfg(tmp_path, f"mb{mb}", micro_batch_size=mb, variant=variant, max_grad_norm=1e9,
                         max_new_tokens=6), model=model, tokenizer=tok)
        tr.optimizer = torch.optim.SGD(tr.params, lr=1.0)
        b = tr.sample_batch()
        assert len(set(b.rollout.lengths.tolist())) >= 1
        tr.update(b)
        params.append([p.detach().clone() for p in tr.params])
    for a, b in zip(*params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# advantages by variant: GDPO's reward matrix, GOPO's ranks, ScaleRL's batch std, unscorable completions
# ---------------------------------------------------------------------------------------------


def test_gdpo_normalises_each_reward_function_with_the_configured_weights(tmp_path):
    from grpo_lessons.core.advantages import decoupled_advantages

    tr = trainer(cfg(tmp_path, variant="gdpo", reward_weights=(1.0, 0.5)))
    b = tr.sample_batch()
    ids = [row[m.bool()].tolist() for row, m in zip(b.rollout.completion_ids, b.rollout.completion_mask)]
    R = torch.tensor([idsum(ids), distinct(ids)]).T  # (N, 2) by hand
    torch.testing.assert_close(b.reward_matrix, R)
    torch.testing.assert_close(b.advantages, decoupled_advantages(R, 4, weights=[1.0, 0.5]))
    summed = group_advantages(R[:, 0] + 0.5 * R[:, 1], 4)  # GRPO's sum-then-normalise is another number
    assert float((b.advantages - summed).abs().max()) > 1e-3
    # shaping terms are extra columns: the entropy bonus enters GDPO as its own normalised reward, weight alpha
    tr2 = trainer(cfg(tmp_path, "ent", variant="gdpo", reward_weights=(1.0, 0.5), entropy_bonus=0.2))
    b2 = tr2.sample_batch()
    H = completion_entropy(b2.rollout.sampling_entropy, b2.rollout.completion_mask)
    torch.testing.assert_close(b2.reward_matrix[:, 2], H)
    torch.testing.assert_close(b2.advantages, decoupled_advantages(b2.reward_matrix, 4, weights=[1.0, 0.5, 0.2]))


def test_gopo_and_scalerl_advantages_in_the_trainer(tmp_path):
    from grpo_lessons.core.advantages import rank_advantages

    b = trainer(cfg(tmp_path, "gopo", variant="gopo")).sample_batch()
    torch.testing.assert_close(b.advantages, rank_advantages(b.rewards, 4))
    assert sorted(set(b.advantages.view(-1, 4)[0].tolist())) != [0.0]
    b = trainer(cfg(tmp_path, "scalerl", variant="scalerl")).sample_batch()
    torch.testing.assert_close(b.advantages, group_advantages(b.rewards, 4, scale="batch_centered"))
    assert float((b.advantages - group_advantages(b.rewards, 4)).abs().max()) > 1e-3


def first_unscorable(completion_ids, **kw):
    """None for the first completion of every group (positions 0, 4, ...), else idsum."""
    r = idsum(completion_ids)
    return [None if i % 4 == 0 else x for i, x in enumerate(r)]


def first_unscorable_2(completion_ids, **kw):
    return [None if i % 4 == 0 else x for i, x in enumerate(distinct(completion_ids))]


@pytest.mark.parametrize("variant", ["grpo", "gdpo", "dr_grpo"])
def test_unscorable_completions_get_zero_advantage_and_stay_out_of_the_statistics(tmp_path, variant):
    tr = trainer(cfg(tmp_path, variant=variant, entropy_bonus=0.1),
                 reward_funcs=[first_unscorable, first_unscorable_2])
    b = tr.sample_batch()
    out = torch.arange(8) % 4 == 0
    assert bool(torch.isnan(b.rewards[out]).all()) and not bool(torch.isnan(b.rewards[~out]).any())
    assert bool(torch.isnan(b.reward_matrix[out]).all())  # the entropy column does not make them scorable
    assert torch.equal(b.advantages[out], torch.zeros(2))
    # the scored rows get the advantages of their groups without the unscorable one
    scored = b.reward_matrix[~out]  # (6, 3): groups of 3
    w = tr.matrix_weights
    if variant == "gdpo":
        from grpo_lessons.core.advantages import decoupled_advantages
        ref = decoupled_advantages(scored, 3, weights=w)
    else:
        ref = group_advantages((scored * torch.tensor(w)).sum(1), 3, scale=tr.variant.advantage_scale)
    torch.testing.assert_close(b.advantages[~out], ref)
    row = tr._sample_fields(b.stats)
    assert row["reward_mean"] == pytest.approx(float(b.rewards[~out].mean()), rel=1e-6)
    m = tr.update(b)
    assert math.isfinite(m["loss"])


def test_dppo_anchor_is_the_sampler_copy_when_there_is_one(tmp_path, monkeypatch):
    import grpo_lessons.training.trainer as trainer_mod

    seen = []
    real = trainer_mod.policy_loss

    def spy(*args, **kw):
        seen.append(kw.get("sampling_logp"))
        return real(*args, **kw)

    monkeypatch.setattr(trainer_mod, "policy_loss", spy)
    tr = trainer(cfg(tmp_path, variant="dppo_binary_tv", sampler_dtype="bfloat16"))
    b = tr.sample_batch()
    tr.update(b)
    assert seen and seen[0] is not None
    torch.testing.assert_close(seen[0], b.rollout.sampling_logps)  # mu: the bf16 sampler's own log-probs
    seen.clear()
    tr = trainer(cfg(tmp_path, "plain", variant="dppo_binary_tv"))
    tr.update(tr.sample_batch())
    assert seen == [None]  # no sampler copy: the anchor is pi_old


def test_shaping_pieces_by_hand():
    from grpo_lessons.core.shaping import informative_groups

    # NaN (unscorable) is ignored; fewer than two scored completions is no signal
    nan = float("nan")
    r = torch.tensor([nan, 1.0, 1.0, 1.0, nan, 0.0, 1.0, 0.0, nan, nan, nan, 1.0])
    assert informative_groups(r, 4).tolist() == [False, True, False]
    # GDPO's matrix: a group counts if any reward function varies in it (the sums may tie)
    R = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    assert informative_groups(R, 2).tolist() == [True, False]
    assert informative_groups(R.sum(1), 2).tolist() == [False, False]
    # uniform over V: entropy log V; a one-hot-ish distribution: ~0
    lg = torch.zeros(1, 2, 5)
    lg[0, 1, 3] = 50.0
    h = token_entropy(lg)
    assert float(h[0, 0]) == pytest.approx(math.log(5), rel=1e-6) and float(h[0, 1]) < 1e-15 + 1e-12
    # completion entropy: the masked mean, EOS included
    H = completion_entropy(torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert H.tolist() == [1.5, 4.0]


@pytest.mark.parametrize("variant", ["grpo", "dapo", "scalerl"])
def test_entropy_in_loss_adds_up_over_micro_batches(tmp_path, variant):
    tok = tiny_tokenizer()
    params = []
    for mb in (4, 8):
        model = tiny_qwen(tok)
        tr = trainer(cfg(tmp_path, f"mb{mb}", micro_batch_size=mb, variant=variant, max_grad_norm=1e9,
                         entropy_bonus=0.5, entropy_in="loss", mask_truncated_completions=False,
                         dynamic_sampling=False), model=model, tokenizer=tok)
        tr.optimizer = torch.optim.SGD(tr.params, lr=1.0)
        row = tr.update(tr.sample_batch())
        params.append([p.detach().clone() for p in tr.params] + [torch.tensor(row["entropy_bonus"])])
    for a, b in zip(*params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_sampler_entropy_under_top_k_truncation_is_that_of_the_truncated_distribution():
    from grpo_lessons.training.rollout import InverseCDFSampler

    torch.manual_seed(0)
    scores = torch.randn(2, 10)
    s = InverseCDFSampler(0.7, top_k=3, record_topk=3)
    s(None, scores)
    top = torch.softmax(scores.topk(3, dim=-1).values / 0.7, dim=-1)  # (2, 3) the renormalised top-3
    torch.testing.assert_close(s.entropy()[:, 0], -(top * top.log()).sum(-1))
    ids, lps = s.topk()
    assert torch.equal(ids[:, 0], scores.topk(3, dim=-1).indices)
    torch.testing.assert_close(lps[:, 0].exp(), top)
