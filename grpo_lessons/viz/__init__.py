"""Widgets and plots, one module per notebook family.  Each pairs a *pure* function that computes what is drawn
(unit tested, no display needed) with a plotting function and a thin ipywidgets wrapper.  Import the submodule:

=================================  ===================================================================  =========
module                             topic                                                                notebooks
=================================  ===================================================================  =========
``grpo_lessons.viz.advantages``    baselines, critic memory, group advantages, zero-gradient groups     01, 02
``grpo_lessons.viz.clipping``      clip region, KL estimators, clip-higher, GSPO ratio, SAPO gate       03, 07, 08, 10
``grpo_lessons.viz.length``        token weights by aggregation, length drift, overlong penalty/filter  03, 06, 07
``grpo_lessons.viz.pairwise``      2-GRPO pair advantages and gradient weights                          09
``grpo_lessons.viz.comparison``    a variant against GRPO at an equal rollout budget (no widgets)       06-10
``grpo_lessons.viz.rewards``       reward hacking, GDPO, GOPO, entropy and diversity                    04, 15-18
``grpo_lessons.viz.offpolicy``     train/inference mismatch, VESPO, DPPO, CISPO, scaling fits           11-14
``grpo_lessons.viz.training``      live training curves (and the command line's saved plot)             05
=================================  ===================================================================  =========

``viz.core`` and ``viz.variants`` are deprecated aliases that re-export the modules above.  A new notebook family
adds a module here rather than growing an existing one.
"""
