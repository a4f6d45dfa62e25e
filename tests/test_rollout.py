"""Rollout on tiny Qwen models: shapes, EOS/truncation tracking, log-probs of the sampling distribution."""

import pytest
import torch

from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer
from grpo_lessons.training.rollout import (Rollout, completion_mask_from_ids, concat_rollouts, encode_prompts,
                                  generate_completions, per_token_logps, rollout_logps)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_qwen(tok)


def eos_biased(tok, bias: float, seed: int = 0):
    """A tiny model whose LM head favours EOS by ``bias`` logits: some completions end, some are cut."""
    m = tiny_qwen(tok, seed=seed)
    head = torch.nn.Linear(m.config.hidden_size, m.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(m.get_input_embeddings().weight)
        head.bias.zero_()
        head.bias[tok.eos_token_id] = bias
    m.lm_head = head
    m.config.tie_word_embeddings = False
    return m


PROMPTS = [
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "What is 41 + 58? Reply with only the number."}],
    [{"role": "user", "content": "Hi"}],
]


def test_shapes_and_group_layout(model, tok):
    torch.manual_seed(0)
    ro = generate_completions(model, tok, PROMPTS, group_size=4, max_new_tokens=6)
    N = 3 * 4
    assert len(ro) == N and ro.num_prompts == 3
    assert ro.completion_ids.shape == ro.completion_mask.shape == ro.logps.shape
    assert ro.completion_ids.shape[0] == N and ro.completion_ids.shape[1] <= 6
    assert ro.prompt_ids.shape == ro.prompt_mask.shape and ro.prompt_ids.shape[0] == N
    assert ro.is_eos.shape == (N,) and len(ro.texts) == N
    # the G rows of a group share the prompt; left padding puts a real token in the last column
    for g in range(3):
        rows = ro.prompt_ids[g * 4:(g + 1) * 4]
        assert (rows == rows[0]).all()
    assert bool(ro.prompt_mask[:, -1].all())
    assert ro.input_ids.shape == (N, ro.prompt_ids.shape[1] + ro.completion_ids.shape[1])


def test_chat_template_is_applied(tok):
    enc = encode_prompts(tok, [PROMPTS[0]])
    text = tok.decode(enc["input_ids"][0])
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


def test_completion_mask_and_eos_by_hand():
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])  # eos = 2
    mask, eos = completion_mask_from_ids(ids, [2])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert eos.tolist() == [True, False, True]


def test_eos_and_truncation_tracking(tok):
    m = eos_biased(tok, bias=5.0)
    torch.manual_seed(1)
    ro = generate_completions(m, tok, PROMPTS[:2], group_size=8, max_new_tokens=5)
    eos = tok.eos_token_id
    assert ro.is_eos.any() and ro.truncated.any(), "the biased model should both stop and run on"
    for i in range(len(ro)):
        n = int(ro.lengths[i])
        row = ro.completion_ids[i].tolist()
        if ro.is_eos[i]:
            assert row[n - 1] == eos and eos not in row[:n - 1]  # mask ends at the first EOS, included
        else:
            assert n == ro.completion_ids.shape[1] == 5 and eos not in row
        assert (ro.completion_mask[i, n:] == 0).all() and (ro.completion_ids[i, n:] == tok.pad_token_id).all()
        assert "<|im_end|>" not in ro.texts[i]
    assert (ro.truncated == ~ro.is_eos).all()


def test_logps_match_a_direct_forward_pass_per_sequence(tok):
    m = eos_biased(tok, bias=3.0)
    torch.manual_seed(2)
    temp = 0.7
    ro = generate_completions(m, tok, PROMPTS, group_size=3, max_new_tokens=5, temperature=temp)
    for i in range(len(ro)):
        p = ro.prompt_ids[i][ro.prompt_mask[i].bool()]  # unpadded prompt
        n = int(ro.lengths[i])
        c = ro.completion_ids[i, :n]
        seq = torch.cat([p, c]).unsqueeze(0)
        with torch.no_grad():
            logits = m(input_ids=seq).logits[0, len(p) - 1:-1] / temp  # (n, V): position t predicts token t+1
        direct = torch.log_softmax(logits, -1).gather(-1, c.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(ro.logps[i, :n], direct, atol=1e-5, rtol=1e-5)
        assert (ro.logps[i, n:] == 0).all()


def test_logps_are_those_of_the_sampling_distribution(tok):
    """generate's processed scores at temperature T (top_k=0, top_p=1) give the same log-probs."""
    m = eos_biased(tok, bias=2.0)
    enc = encode_prompts(tok, PROMPTS[:1])
    torch.manual_seed(3)
    out = m.generate(**enc, do_sample=True, temperature=0.5, top_k=0, top_p=1.0, max_new_tokens=4,
                     min_new_tokens=4, output_scores=True, return_dict_in_generate=True,
                     pad_token_id=tok.pad_token_id, eos_token_id=[])
    comp = out.sequences[:, enc["input_ids"].shape[1]:]
    scores = torch.stack(out.scores, 1)  # (1, T, V) = logits / temperature
    from_scores = torch.log_softmax(scores, -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
    mine = per_token_logps(m, out.sequences, torch.ones_like(out.sequences), 4, temperature=0.5)
    torch.testing.assert_close(mine, from_scores, atol=1e-4, rtol=1e-4)


def test_shared_prompt_forward_matches_values_and_gradients(tok):
    m = eos_biased(tok, bias=3.0)
    torch.manual_seed(4)
    ro = generate_completions(m, tok, PROMPTS, group_size=4, max_new_tokens=5)
    mask = ro.completion_mask.float()
    plain = rollout_logps(m, ro, share_prompt=False)
    shared = rollout_logps(m, ro, share_prompt=True)
    torch.testing.assert_close(shared * mask, plain * mask, atol=1e-5, rtol=1e-5)
    params = [p for p in m.parameters()]
    g1 = torch.autograd.grad((plain * mask).sum(), params)
    g2 = torch.autograd.grad((shared * mask).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # a slice of whole groups equals the same rows of the full result
    torch.testing.assert_close(rollout_logps(m, ro, rows=slice(4, 12)).detach(), shared[4:12].detach(),
                               atol=1e-5, rtol=1e-5)


def test_shared_prompt_sampling_draws_the_same_tokens(model, tok):
    a = generate_completions(model, tok, PROMPTS, 3, max_new_tokens=5, share_prompt=False, generator_seed=5)
    b = generate_completions(model, tok, PROMPTS, 3, max_new_tokens=5, share_prompt=True, generator_seed=5)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_seeded_sampling_is_reproducible(model, tok):
    a = generate_completions(model, tok, PROMPTS, 2, max_new_tokens=4, generator_seed=7)
    b = generate_completions(model, tok, PROMPTS, 2, max_new_tokens=4, generator_seed=7)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts


def test_greedy_and_batching(model, tok):
    a = generate_completions(model, tok, PROMPTS, 1, max_new_tokens=4, temperature=None, compute_logps=False)
    b = generate_completions(model, tok, PROMPTS, 1, max_new_tokens=4, temperature=None, compute_logps=False,
                             batch_size=1)
    assert a.texts == b.texts and a.logps is None
    with pytest.raises(ValueError, match="greedy"):
        generate_completions(model, tok, PROMPTS, 2, temperature=None)


def test_select_and_concat_groups(model, tok):
    torch.manual_seed(0)
    ro = generate_completions(model, tok, PROMPTS, 2, max_new_tokens=3)
    part = ro.select_groups([2, 0])
    assert part.prompts == [PROMPTS[2], PROMPTS[0]] and part.texts == ro.texts[4:6] + ro.texts[0:2]
    both = concat_rollouts([ro.select_groups([0]), ro.select_groups([1, 2])], tok.pad_token_id)
    assert both.texts == ro.texts and torch.equal(both.completion_mask, ro.completion_mask)
    torch.testing.assert_close(rollout_logps(model, both).detach() * both.completion_mask,
                               ro.logps, atol=1e-5, rtol=1e-5)


def test_bad_input(model, tok):
    with pytest.raises(ValueError, match="no prompts"):
        generate_completions(model, tok, [], 2)
    with pytest.raises(ValueError, match="context"):
        generate_completions(model, tok, [" ".join(["What is 2 + 3?"] * 200)], 2, max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_completions(model, tok, PROMPTS, 2, max_new_tokens=0)
    with pytest.raises(TypeError, match="prompt must be"):
        generate_completions(model, tok, [123], 2)
    with pytest.raises(ValueError, match="logits_to_keep"):
        per_token_logps(model, torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long), 3)


def test_rollout_is_a_dataclass_with_completions_for_trl(model, tok):
    ro = generate_completions(model, tok, [PROMPTS[0], "plain text prompt"], 2, max_new_tokens=2)
    comps = ro.completions()
    assert isinstance(ro, Rollout)
    assert comps[0] == [{"role": "assistant", "content": ro.texts[0]}] and comps[2] == ro.texts[2]


def test_hub_generation_config_does_not_reach_the_sampler(tok):
    # A hub model's generation_config (repetition_penalty, top_k=50, no_repeat_ngram_size ...) must not bend the
    # sampler: the log-probs the draw used must equal the scored log-probs of softmax(logits / T).
    m = eos_biased(tok, bias=1.0)
    m.generation_config.repetition_penalty = 1.3
    m.generation_config.top_k = 5
    m.generation_config.no_repeat_ngram_size = 2
    m.generation_config.typical_p = 0.5
    for share in (True, False):
        torch.manual_seed(11)
        ro = generate_completions(m, tok, PROMPTS, group_size=4, max_new_tokens=8, temperature=0.7,
                                  share_prompt=share)
        assert ro.sampling_logps is not None and ro.sampling_logps.shape == ro.logps.shape
        torch.testing.assert_close(ro.sampling_logps, ro.logps, atol=1e-4, rtol=1e-4)
        # repeated tokens do happen (no_repeat_ngram / the penalty would have forbidden or damped them)
        assert (ro.sampling_logps * ro.completion_mask).lt(-1e-3).any()
    assert m.generation_config.repetition_penalty == 1.3  # the model's own config is restored


def test_inverse_cdf_sampler_draws_from_the_tempered_softmax():
    from grpo_lessons.training.rollout import InverseCDFSampler

    logits = torch.tensor([0.0, 1.0, 2.0, -30.0, 0.5])
    n, T = 40_000, 0.7
    torch.manual_seed(0)
    s = InverseCDFSampler(T)
    out = s(None, logits.expand(n, -1).clone())  # (n, V): 0 at the drawn token, -inf elsewhere
    drawn = out.argmax(-1)
    freq = torch.bincount(drawn, minlength=5).float() / n
    p = torch.softmax(logits / T, -1)
    assert float((freq - p).abs().max()) < 0.01  # 4 standard errors at n = 40k
    torch.testing.assert_close(s.logps()[:, 0], torch.log(p)[drawn])
    # top-k = 2 keeps only the two most likely tokens, renormalised
    s2 = InverseCDFSampler(T, top_k=2)
    d2 = s2(None, logits.expand(n, -1).clone()).argmax(-1)
    assert set(d2.unique().tolist()) == {1, 2}
    torch.testing.assert_close(s2.logps()[:, 0], torch.log_softmax(logits[[1, 2]] / T, -1)[(d2 == 2).long()])


def test_sampler_topk_record_is_finite_on_padding_and_feeds_dppo_topk(tok):
    """A sampler truncated to top_k = 3 recording K = 5: positions 4 and 5 are -inf (probability 0) at real tokens,
    and the record must be 0 on padding -- -inf * 0 was NaN there, so topk_divergence raised as soon as one
    completion ended early.  The DPPO top-K loss then runs on the whole batch."""
    from grpo_lessons.training.update import batch_loss

    m = eos_biased(tok, bias=4.0)
    ro = generate_completions(m, tok, PROMPTS, group_size=4, max_new_tokens=6, temperature=1.0, top_k=3,
                              record_topk=5, generator_seed=0)
    pad = ~ro.completion_mask.bool()  # (N, T)
    assert pad.any() and ro.is_eos.any(), "some completions must end early"
    lps = ro.sampler_topk_logps  # (N, T, 5)
    assert not torch.isnan(lps).any()
    assert (lps[pad] == 0).all()
    assert torch.isinf(lps[~pad][:, 3:]).all() and torch.isfinite(lps[~pad][:, :3]).all()
    for name in ("sampling_entropy", "sampling_logps"):
        assert torch.isfinite(getattr(ro, name)).all() and (getattr(ro, name)[pad] == 0).all()
    adv = torch.linspace(-1, 1, len(ro), dtype=torch.float32)
    out, _ = batch_loss(m, ro, adv, ro.completion_mask.float(), variant="dppo_topk_tv",
                        correction={"sampling_logp": ro.sampling_logps})
    assert torch.isfinite(out.loss)


def test_sampling_changes_no_shared_object(tok):
    """Another thread using the same tokenizer and model sees neither padding_side nor generation_config change
    while this one samples (the tokenizer was set to left padding and the model's config swapped for a blank one)."""
    import threading
    from collections import Counter

    from grpo_lessons.training.models import tiny_tokenizer

    right = tiny_tokenizer()
    right.padding_side = "right"  # a user's tokenizer, set up for training
    m = tiny_qwen(right)
    m.generation_config.repetition_penalty = 1.3  # as a hub model's config might
    own = m.generation_config
    before = own.to_dict()
    seen = Counter()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if right.padding_side != "right":
                seen["padding_side"] += 1
            if m.generation_config is not own:
                seen["generation_config"] += 1

    t = threading.Thread(target=watch)
    t.start()
    try:
        for share in (True, False):
            for _ in range(3):
                generate_completions(m, right, PROMPTS, 4, max_new_tokens=8, temperature=0.7, share_prompt=share)
    finally:
        stop.set()
        t.join()
    assert seen == Counter(), dict(seen)
    assert m.generation_config is own and own.to_dict() == before and right.padding_side == "right"
    # the prompts were still padded on the left (the right-padding tokenizer is not followed)
    enc = encode_prompts(right, [PROMPTS[0], "Hi"])
    assert enc["attention_mask"][1, 0] == 0 and enc["attention_mask"][1, -1] == 1


def test_the_samples_ignore_the_models_generation_config(tok):
    """The same seed draws the same tokens with a hub-like generation_config and with a blank one; a setting that no
    explicit argument can neutralise (it would be merged in by generate) is refused by name, not applied."""
    from transformers import GenerationConfig

    hub = eos_biased(tok, bias=1.0)
    for k, v in dict(repetition_penalty=1.3, top_k=5, no_repeat_ngram_size=2, typical_p=0.5, do_sample=True,
                     temperature=0.3, min_length=30, max_length=9).items():
        setattr(hub.generation_config, k, v)
    blank = eos_biased(tok, bias=1.0)
    blank.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    for share in (True, False):
        a = generate_completions(hub, tok, PROMPTS, 3, max_new_tokens=8, temperature=0.7, share_prompt=share,
                                 generator_seed=4)
        b = generate_completions(blank, tok, PROMPTS, 3, max_new_tokens=8, temperature=0.7, share_prompt=share,
                                 generator_seed=4)
        assert torch.equal(a.completion_ids, b.completion_ids)
        assert torch.equal(a.sampling_logps, b.sampling_logps)
    for k, v in dict(suppress_tokens=[5], forced_eos_token_id=2, min_new_tokens=2, bad_words_ids=[[7]]).items():
        m = tiny_qwen(tok)
        setattr(m.generation_config, k, v)
        with pytest.raises(ValueError, match=k):
            generate_completions(m, tok, PROMPTS, 2, max_new_tokens=4)
        assert getattr(m.generation_config, k) == v  # reported, not changed
