"""Every claim of the claims table, one :func:`~grpo_lessons.lab.claims.register_claim` call each.

Each pair of arms differs only in the paper's change (a piece of the variant, a loss option, a sampling rule, a
budget); everything else, the task included, is shared.  Citations name the paper whose mechanism is tested.
"""

from __future__ import annotations

from .claims import Claim, register_claim
from .run import LabConfig

_DR = "Liu et al. 2025, arXiv 2503.20783"
_DAPO = "Yu et al. 2025, arXiv 2503.14476"
_GSPO = "Zheng et al. 2025, arXiv 2507.18071"
_TWO = "Wu et al. 2025, arXiv 2510.00977"
_SAPO = "Gao et al. 2025, arXiv 2511.20347"
_CISPO = "MiniMax 2025, arXiv 2506.13585"
_TIS = "Yao et al. 2025 (TIS); Liu et al. 2025 / IcePop, arXiv 2510.18855 (MIS)"
_VESPO = "Shen et al. 2026, arXiv 2602.10693"
_DPPO = "Qi et al. 2026, arXiv 2602.04879"
_SCALE = "Khatri et al. 2025, arXiv 2510.13786"
_GDPO = "Liu et al. 2026, arXiv 2601.05242"
_GOPO = "Choi et al. 2026, arXiv 2602.03876"
_RLOO = "Ahmadian et al. 2024, arXiv 2402.14740"
_GRPO = "Shao et al. 2024, arXiv 2402.03300"
_VS = "Zhang et al. 2025, arXiv 2510.01171"

#: Several optimiser steps on each sampled batch: the ratio leaves 1 and clipping has something to act on.
STALE = {"num_iterations": 2, "minibatches": 4}
#: A task with a rare right answer on half of its prompts (start below 5 %).
RARE_TASK = {"pass_rates": (0.02, 0.03, 0.04, 0.02, 0.5, 0.3, 0.7, 0.5)}
#: 32 prompts (the default eight, four times): room for 2-GRPO's extra prompts.
WIDE_TASK = {"pass_rates": (0.1, 0.3, 0.5, 0.5, 0.5, 0.7, 0.9, 0.02) * 4}


def _c(**kw) -> Claim:
    return register_claim(Claim(**kw))


# -- 06 Dr. GRPO -------------------------------------------------------------------------------------------------
_len = LabConfig(variant="grpo", steps=150, lr=0.05)
_c(name="dr_grpo_wrong_length", paper=_DR, notebook="06_dr_grpo.ipynb",
   statement="GRPO's 1/|o| lets wrong answers grow longer; Dr. GRPO's constant normaliser stops the growth",
   variant_label="dr_grpo", baseline_label="grpo", arm=_len.replace(variant="dr_grpo"), base=_len,
   metric="len_wrong", direction="-", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="dr_grpo_right_length", paper=_DR, notebook="06_dr_grpo.ipynb",
   statement="GRPO's 1/|o| shortens right answers; without it they keep their length",
   variant_label="dr_grpo", baseline_label="grpo", arm=_len.replace(variant="dr_grpo"), base=_len,
   metric="len_right", direction="+", sweep=("lr", (0.01, 0.05, 0.2)))
_std = LabConfig(variant="grpo")
_c(name="dr_grpo_std_bias", paper=_DR, notebook="06_dr_grpo.ipynb",
   statement="dividing by std(R) over-weights prompts that are nearly always right or wrong; without it they weigh less",
   variant_label="grpo, no std division", baseline_label="grpo",
   arm=_std.replace(pieces={"advantage_scale": "none"}), base=_std, metric="extreme_weight", direction="-",
   reduce="probe", sweep=("group_size", (4, 8, 16)))

# -- 07 DAPO -----------------------------------------------------------------------------------------------------
_ch = LabConfig(variant="dapo", steps=60, lr=0.05, loss_options={"epsilon_high": 0.2}, task=RARE_TASK, **STALE)
_c(name="dapo_clip_higher_entropy", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="clip-higher (eps_high 0.28 > eps_low 0.2) prevents entropy collapse",
   variant_label="dapo, eps_high 0.28", baseline_label="dapo, eps_high 0.2",
   arm=_ch.replace(loss_options={"epsilon_high": 0.28}), base=_ch, metric="entropy", direction="+",
   sweep=("num_iterations", (1, 2, 4)), note="with one pass over the batch (num_iterations = 1) its four minibatch steps keep every ratio within a few "
        "per cent of 1, far from 1.2 or 1.28: nothing clips and the two arms are identical on every seed")
_c(name="dapo_clip_higher_rare", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="clip-higher lets low-probability tokens rise",
   variant_label="dapo, eps_high 0.28", baseline_label="dapo, eps_high 0.2",
   arm=_ch.replace(loss_options={"epsilon_high": 0.28}), base=_ch, metric="rare_mass", direction="+",
   reduce="mean", sweep=("num_iterations", (1, 2, 4)))
_ds = LabConfig(variant="dapo", steps=40, lr=0.05, task=RARE_TASK)
_c(name="dapo_dynamic_sampling_per_step", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="dynamic sampling keeps every trained group informative: more progress per step",
   variant_label="dapo + dynamic sampling", baseline_label="dapo",
   arm=_ds.replace(dynamic_sampling=True), base=_ds, metric="p_correct", direction="+",
   sweep=("steps", (10, 40, 120)))
_c(name="dapo_dynamic_sampling_per_sample", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="dynamic sampling's extra samples pay for themselves (the paper reports faster convergence per step "
             "and a similar wall-clock; this row holds the sampled completions equal)",
   variant_label="dapo + dynamic sampling", baseline_label="dapo",
   arm=_ds.replace(dynamic_sampling=True, steps=400, max_completions=40 * 64),
   base=_ds.replace(steps=400, max_completions=40 * 64), metric="p_correct", direction="+",
   sweep=("max_completions", (10 * 64, 40 * 64, 120 * 64)))
_tok = LabConfig(variant="grpo", steps=150, lr=0.05, task={"max_len": 24, "init_length": 10.0})
_c(name="dapo_token_loss_length", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="a token-level loss gives long completions their full weight and curbs unhealthy length growth",
   variant_label="grpo, token-mean loss", baseline_label="grpo",
   arm=_tok.replace(pieces={"aggregation": "token_mean"}), base=_tok, metric="len_wrong", direction="-",
   sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="dapo_token_loss_entropy", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="a token-level loss curbs unhealthy growth of entropy",
   variant_label="grpo, token-mean loss", baseline_label="grpo",
   arm=_tok.replace(pieces={"aggregation": "token_mean"}), base=_tok, metric="entropy", direction="-",
   sweep=("lr", (0.01, 0.05, 0.2)))
_ol = LabConfig(variant="dapo", steps=100, lr=0.05, truncated_scores_zero=True,
                task={"max_len": 10, "init_length": 7.0})
_c(name="dapo_overlong_filter", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="masking truncated completions removes the noise of cut-off samples (a right answer cut off scores 0)",
   variant_label="dapo + overlong filtering", baseline_label="dapo",
   arm=_ol.replace(mask_truncated=True), base=_ol, metric="p_correct", direction="+",
   sweep=("steps", (20, 100, 300)))
_c(name="dapo_soft_overlong", paper=_DAPO, notebook="07_dapo.ipynb",
   statement="the soft overlong punishment (Eq. 13) steers completions away from the length limit",
   variant_label="dapo + soft penalty (L_cache 3)", baseline_label="dapo",
   arm=_ol.replace(overlong_cache=3), base=_ol, metric="truncated", direction="-",
   sweep=("steps", (20, 100, 300)))

# -- 08 GSPO -----------------------------------------------------------------------------------------------------
_gs = LabConfig(variant="grpo", steps=60, lr=0.05, **STALE)
_c(name="gspo_clips_more", paper=_GSPO, notebook="08_gspo.ipynb",
   statement="the sequence ratio with GSPO's range clips far more tokens than GRPO's token clip",
   variant_label="gspo", baseline_label="grpo", arm=_gs.replace(variant="gspo"), base=_gs, metric="clip_frac",
   direction="+", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="gspo_stale_batches", paper=_GSPO, notebook="08_gspo.ipynb",
   statement="on stale batches (several optimiser steps per batch) the sequence ratio trains more efficiently",
   variant_label="gspo", baseline_label="grpo", arm=_gs.replace(variant="gspo"), base=_gs, metric="p_correct",
   direction="+", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))

# -- 09 2-GRPO ---------------------------------------------------------------------------------------------------
_two = LabConfig(variant="grpo", steps=30, lr=0.05, task=WIDE_TASK, group_size=8, prompts_per_step=8)
_c(name="two_grpo_equal_completions", paper=_TWO, notebook="09_two_grpo.ipynb",
   statement="G = 2 with 4x the prompts matches G = 8 at the same number of completions",
   variant_label="G = 2, 32 prompts a step", baseline_label="G = 8, 8 prompts a step",
   arm=_two.replace(group_size=2, prompts_per_step=32), base=_two, metric="p_correct", direction="+",
   sweep=("steps", (10, 30, 90)),
   note="the paper claims about the same accuracy (97.6 % of G = 16's); 'not reproduced' with a small interval is "
        "consistent with it")
_c(name="two_grpo_equal_prompts", paper=_TWO, notebook="09_two_grpo.ipynb",
   statement="at the same prompts per step G = 2 sees a quarter of the completions and learns less per step "
             "(the paper does not claim a match there)",
   variant_label="G = 2, 8 prompts a step", baseline_label="G = 8, 8 prompts a step",
   arm=_two.replace(group_size=2), base=_two, metric="p_correct", direction="-", sweep=("steps", (10, 30, 90)))

# -- 10 SAPO -----------------------------------------------------------------------------------------------------
_sp = LabConfig(variant="grpo", steps=60, lr=0.05, **STALE)
_c(name="sapo_fewer_dead_tokens", paper=_SAPO, notebook="10_sapo.ipynb",
   statement="a smooth gate keeps signal from tokens the hard clip zeroes",
   variant_label="sapo", baseline_label="grpo", arm=_sp.replace(variant="sapo"), base=_sp,
   metric="zero_grad_share", direction="-", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="sapo_stale_batches", paper=_SAPO, notebook="10_sapo.ipynb",
   statement="the soft gate gives steadier, more effective updates on off-policy tokens",
   variant_label="sapo", baseline_label="grpo", arm=_sp.replace(variant="sapo"), base=_sp,
   metric="p_correct", direction="+", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))

# -- 11 TIS / MIS ------------------------------------------------------------------------------------------------
_tis = LabConfig(variant="grpo", sampler_shift=0.5)
_c(name="tis_gradient_bias", paper=_TIS, notebook="11_train_inference_mismatch.ipynb",
   statement="a sampler that differs from the trainer biases the gradient; truncated IS removes most of the bias",
   variant_label="grpo + token_truncate (C = 3)", baseline_label="grpo, no correction",
   arm=_tis.replace(rollout_correction="token_truncate"), base=_tis, metric="grad_bias", direction="-",
   reduce="probe", sweep=("sampler_shift", (0.1, 0.5, 1.0)))
_c(name="mis_gradient_bias", paper=_TIS, notebook="11_train_inference_mismatch.ipynb",
   statement="masking sequences whose ratio leaves [0.5, 2] (MIS / IcePop) removes the bias of a mismatched sampler",
   variant_label="grpo + sequence_mask [0.5, 2]", baseline_label="grpo, no correction",
   arm=_tis.replace(rollout_correction="sequence_mask", rollout_clip_min=0.5, rollout_clip_max=2.0), base=_tis,
   metric="grad_bias", direction="-", reduce="probe", sweep=("sampler_shift", (0.1, 0.5, 1.0)))

# -- 12 VESPO ----------------------------------------------------------------------------------------------------
_ve = LabConfig(variant="bnpo", steps=60, lr=0.05, **STALE)
_c(name="vespo_stale_batches", paper=_VESPO, notebook="12_vespo.ipynb",
   statement="a smooth weight of the whole sequence ratio keeps training effective on stale batches",
   variant_label="vespo", baseline_label="bnpo (token-mean clip)", arm=_ve.replace(variant="vespo"), base=_ve,
   metric="p_correct", direction="+", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))

# -- 13 DPPO -----------------------------------------------------------------------------------------------------
_dp = LabConfig(variant="bnpo", steps=60, lr=0.05, task=RARE_TASK, **STALE)
_c(name="dppo_rare_tokens", paper=_DPPO, notebook="13_dppo.ipynb",
   statement="bounding the probability change (TV) instead of the ratio lets rare tokens learn",
   variant_label="dppo_binary_tv", baseline_label="bnpo (token-mean clip)",
   arm=_dp.replace(variant="dppo_binary_tv"), base=_dp, metric="rare_mass", direction="+",
   reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)),
   note="in this regime DPPO's mask never binds (its row equals CISPO's on every seed, and CISPO has no mask): what "
        "lets the rare answer learn here is that the ratio clip is gone")

# -- 14 CISPO / ScaleRL ------------------------------------------------------------------------------------------
_ci = LabConfig(variant="bnpo", steps=60, lr=0.05, task=RARE_TASK, **STALE)
_c(name="cispo_keeps_gradients", paper=_CISPO, notebook="14_cispo_scalerl.ipynb",
   statement="clipping the IS weight instead of the token keeps every token's gradient",
   variant_label="cispo", baseline_label="bnpo (token-mean clip)", arm=_ci.replace(variant="cispo"), base=_ci,
   metric="zero_grad_share", direction="-", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="cispo_rare_tokens", paper=_CISPO, notebook="14_cispo_scalerl.ipynb",
   statement="keeping the gradient of large-ratio tokens lets rare tokens learn",
   variant_label="cispo", baseline_label="bnpo (token-mean clip)", arm=_ci.replace(variant="cispo"), base=_ci,
   metric="rare_mass", direction="+", reduce="mean", sweep=("lr", (0.01, 0.05, 0.2)),
   note="in this regime no ratio reaches CISPO's cap of 5 and DPPO's mask never binds: the two rows are equal on "
        "every seed")
_sc = LabConfig(variant="cispo", steps=60, lr=0.05)
_c(name="scalerl_prompt_mean", paper=_SCALE, notebook="14_cispo_scalerl.ipynb",
   statement="prompt-level loss averaging is among the choices that train better",
   variant_label="cispo, prompt-mean loss", baseline_label="cispo",
   arm=_sc.replace(pieces={"aggregation": "prompt_mean"}), base=_sc, metric="p_correct", direction="+",
   sweep=("steps", (20, 60, 180)))
_c(name="scalerl_batch_advantages", paper=_SCALE, notebook="14_cispo_scalerl.ipynb",
   statement="batch-level advantage normalisation is among the choices that train better",
   variant_label="cispo, batch-centred advantages", baseline_label="cispo",
   arm=_sc.replace(pieces={"advantage_scale": "batch_centered"}), base=_sc, metric="p_correct", direction="+",
   sweep=("steps", (20, 60, 180)))

# -- 15 GDPO -----------------------------------------------------------------------------------------------------
_gd = LabConfig(variant="grpo", reward="correct_and_brief", brief_len=5)
_c(name="gdpo_distinct_advantages", paper=_GDPO, notebook="15_gdpo.ipynb",
   statement="normalising each reward before summing keeps reward combinations apart (more distinct advantages)",
   variant_label="gdpo", baseline_label="grpo (sum, then normalise)", arm=_gd.replace(variant="gdpo"), base=_gd,
   metric="distinct_advantages", direction="+", reduce="probe", sweep=("group_size", (4, 8, 16)))
_gdt = _gd.replace(steps=100, lr=0.05)
_c(name="gdpo_training", paper=_GDPO, notebook="15_gdpo.ipynb",
   statement="with two rewards, decoupled normalisation trains the primary reward better",
   variant_label="gdpo", baseline_label="grpo (sum, then normalise)", arm=_gdt.replace(variant="gdpo"), base=_gdt,
   metric="p_correct", direction="+", sweep=("steps", (30, 100, 300)))

# -- 16 GOPO -----------------------------------------------------------------------------------------------------
_go = LabConfig(variant="bnpo", steps=100, lr=0.05, reward="reward_model", reward_distortion=6.0,
                task={"graded": True, "pass_rates": (0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.1, 0.05)})
_c(name="gopo_distorted_reward", paper=_GOPO, notebook="16_gopo.ipynb",
   statement="rank advantages are immune to a monotone, heavy-tailed distortion of the reward model",
   variant_label="bnpo with rank advantages (gopo)", baseline_label="bnpo (group z-scores)",
   arm=_go.replace(variant="gopo"), base=_go, metric="quality", direction="+",
   sweep=("reward_distortion", (1.0, 6.0, 12.0)))

_c(name="gopo_noisy_reward", paper=_GOPO, notebook="16_gopo.ipynb",
   statement="rank advantages keep training on a noisy, heavy-tailed reward model, where z-scores follow its outliers",
   variant_label="bnpo with rank advantages (gopo)", baseline_label="bnpo (group z-scores)",
   arm=_go.replace(variant="gopo", reward_noise=0.5), base=_go.replace(reward_noise=0.5), metric="quality",
   direction="+", sweep=("reward_noise", (0.25, 0.5, 1.0)),
   note="lognormal noise of log-sd reward_noise multiplies the distorted score: it breaks the order of the true "
        "qualities, so neither advantage is immune to it; the question is which one its outliers move less")

# -- 17 diversity, KL and RLOO -----------------------------------------------------------------------------------
_kl = LabConfig(variant="grpo", steps=150, lr=0.05, beta=0.0)
_c(name="kl_keeps_policy_near_start", paper=_GRPO, notebook="17_diversity.ipynb",
   statement="the beta * KL term keeps the policy near its start",
   variant_label="grpo, beta 0.1", baseline_label="grpo, beta 0", arm=_kl.replace(beta=0.1), base=_kl,
   metric="kl_start", direction="-", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="kl_keeps_entropy", paper=_GRPO, notebook="17_diversity.ipynb",
   statement="the KL anchor keeps more of the starting policy's entropy (diversity)",
   variant_label="grpo, beta 0.1", baseline_label="grpo, beta 0", arm=_kl.replace(beta=0.1), base=_kl,
   metric="entropy", direction="+", sweep=("lr", (0.01, 0.05, 0.2)))
_c(name="entropy_bonus_keeps_entropy", paper="TRL entropy_coef; veRL entropy_coeff", notebook="17_diversity.ipynb",
   statement="an entropy bonus in the loss keeps entropy up",
   variant_label="grpo, entropy_coef 0.01", baseline_label="grpo", arm=_kl.replace(entropy_coef=0.01), base=_kl,
   metric="entropy", direction="+", sweep=("lr", (0.01, 0.05, 0.2)))
_rl = LabConfig(variant="rloo")
_c(name="rloo_group_mean_shrinks", paper=_RLOO, notebook="17_diversity.ipynb",
   statement="the group mean that includes the sample shrinks the advantage by (G - 1)/G; leave-one-out does not",
   variant_label="rloo (leave-one-out)", baseline_label="rloo with the group mean",
   arm=_rl, base=_rl.replace(pieces={"advantage_scale": "none"}), metric="adv_abs", direction="+", reduce="probe",
   sweep=("group_size", (2, 4, 8)))

# -- 18 Verbalized Sampling: typicality bias -----------------------------------------------------------------------
_ty = LabConfig(variant="grpo", steps=150, lr=0.05, reward="typical", typicality_bias=0.0,
                task={"n_right": 3, "pass_rates": (0.6, 0.5, 0.7, 0.6, 0.4, 0.6, 0.5, 0.8)})
_c(name="typicality_bias_collapses", paper=_VS, notebook="18_verbalized_sampling.ipynb",
   statement="a reward that adds alpha * log pi_ref (typicality bias) collapses the policy onto its most typical "
             "right answer (mode collapse)",
   variant_label="reward + 0.5 log pi_ref", baseline_label="reward alone",
   arm=_ty.replace(typicality_bias=0.5), base=_ty, metric="right_entropy", direction="-",
   sweep=("typicality_bias", (0.1, 0.5, 1.0)), sweep_variant_only=True,
   note="with alpha = 0 every right answer earns the same reward: their shares drift only by chance")
