"""Layer 2, training: a real model in the loop.  Extra ``[train]`` (transformers, accelerate, peft, gguf, tqdm).

Tasks and data (:mod:`~grpo_lessons.training.data`), model loading (:mod:`~grpo_lessons.training.models`),
sampling (:mod:`~grpo_lessons.training.rollout`, :mod:`~grpo_lessons.training.attention`), the trainer and its
pieces (:mod:`~grpo_lessons.training.trainer`), training curves (:mod:`~grpo_lessons.training.plots`) and the
``grpo-lessons`` command line (:mod:`~grpo_lessons.training.cli`).  Imports from core only.
"""
