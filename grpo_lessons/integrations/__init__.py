"""Layer 3, integrations: TRL.  Extra ``[trl]``.

:mod:`~grpo_lessons.integrations.trl_bridge` puts the package's losses and advantages inside TRL's
``GRPOTrainer``; :mod:`~grpo_lessons.integrations.trl_train` launches such a run (one or several processes).
Imports from core and training.
"""
