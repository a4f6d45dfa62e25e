"""Layer 1, core: the mathematics of GRPO and its variants.  Needs torch and numpy only.

Advantages, importance ratios, objectives, aggregation, KL estimators, rollout corrections, divergences, the
assembled :func:`~grpo_lessons.core.losses.policy_loss`, the variant registry, reward shaping and dynamic sampling,
and the pure-Python rewards and parsers of model output (:mod:`grpo_lessons.core.rewards`,
:mod:`grpo_lessons.core.diversity`, :mod:`grpo_lessons.core.verbalized`).  Nothing here imports from the layers
above (training, integrations, course); ``tests/test_layers.py`` enforces it.

Every family of pieces (advantage scales, ratio levels, objectives, aggregations, rollout corrections) and the
variants built from them is a :class:`~grpo_lessons.core.registry.Registry`: a new piece is one ``register_*`` call.
"""
