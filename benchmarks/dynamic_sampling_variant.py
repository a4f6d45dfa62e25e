"""A plug-in for ``grpo-lessons compare --plugin benchmarks.dynamic_sampling_variant``: GRPO with DAPO's dynamic
sampling and nothing else, so that a paired study changes exactly one thing.

``grpo_dynamic_sampling`` has GRPO's pieces (group-normalised advantages, token ratios, the clipped objective, the
per-sequence mean) and one training default more than ``grpo``: ``dynamic_sampling=True`` (drop the groups whose
rewards are all equal and sample more until the batch is full, within the trainer's resampling rounds).  ``compare``
gives both arms the same beta (0), so GRPO's own beta = 0.04 does not enter either arm.

    HF_HUB_OFFLINE=1 grpo-lessons compare --plugin benchmarks.dynamic_sampling_variant \\
        --variants grpo,grpo_dynamic_sampling --seeds 0,1,2,3,4 --task arithmetic --model smollm2 \\
        --steps 4 --prompts-per-step 4 --precision fp32 --out benchmarks/results/dynamic_sampling

At equal sampled completions instead of equal steps (GRPO's four steps of 8 prompts x G = 8 = 256; the arm with
dynamic sampling refills within that budget and takes fewer steps):

    HF_HUB_OFFLINE=1 grpo-lessons compare --plugin benchmarks.dynamic_sampling_variant \\
        --variants grpo,grpo_dynamic_sampling --seeds 0,1,2,3,4 --task arithmetic --model smollm2 \\
        --steps 16 --prompts-per-step 8 --max-completions 256 --precision fp32 --threads 2 \\
        --out benchmarks/results/dynamic_sampling_equal_completions

(The committed RESULT.md files also pass ``--title`` and ``--question``, which change only their first lines.)
"""

from __future__ import annotations

import dataclasses

from grpo_lessons import get_variant, list_variants, register

if "grpo_dynamic_sampling" not in list_variants():
    _grpo = get_variant("grpo")
    register(dataclasses.replace(
        _grpo, name="grpo_dynamic_sampling", title="GRPO + dynamic sampling (DAPO's, alone)", trl=None,
        train_defaults={**dict(_grpo.train_defaults), "dynamic_sampling": True},
        notes="GRPO with one change: DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476)."))
