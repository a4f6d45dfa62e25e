"""The lab: exact small policies whose every update goes through the package's own losses (torch and numpy only).

* :mod:`~grpo_lessons.lab.policy` -- a tabular policy over short token sequences (an answer token, then filler tokens
  and EOS), sampling with common random numbers, and every metric computed exactly from its tables;
* :mod:`~grpo_lessons.lab.run` -- :func:`~grpo_lessons.lab.run.train` and :func:`~grpo_lessons.lab.run.probe`: GRPO
  updates by variant name through :func:`grpo_lessons.core.variants.variant_advantages` and
  :func:`grpo_lessons.core.losses.policy_loss`;
* :mod:`~grpo_lessons.lab.claims` -- what each paper claims its change does, as paired comparisons over seeds with a
  verdict (the claims themselves are registered in :mod:`~grpo_lessons.lab.claim_list`);
* :mod:`~grpo_lessons.lab.length_toy` -- notebook 06's first length experiment (two stop logits);
* :mod:`~grpo_lessons.lab.cli` -- ``grpo-lessons lab``.

Sits between the core and the training layer: it imports the core only.
"""

from . import claim_list as _claim_list  # noqa: F401  (registers the claims)
from .claims import CLAIMS, Claim, get_claim, run_claim, run_sweep
from .policy import LabTask, TabularPolicy, exact_metrics, make_task
from .run import LabConfig, LabRun, probe, train

__all__ = ["LabTask", "TabularPolicy", "make_task", "exact_metrics", "LabConfig", "LabRun", "train", "probe",
           "Claim", "CLAIMS", "get_claim", "run_claim", "run_sweep"]
