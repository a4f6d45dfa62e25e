"""Widgets and plots, one module per notebook family.

Each module pairs a *pure* function that computes what is drawn (unit tested, no display needed) with a plotting
function and a thin ipywidgets wrapper.  Import the submodule:

* ``grpo_lessons.course.viz.advantages`` -- baselines, critic memory, group advantages, zero-gradient groups (01, 02)
* ``grpo_lessons.course.viz.clipping`` -- clip region, KL estimators, clip-higher, GSPO ratio, SAPO gate (03, 07, 08, 10)
* ``grpo_lessons.course.viz.length`` -- token weights by aggregation, length drift, overlong penalty/filter (03, 06, 07)
* ``grpo_lessons.course.viz.pairwise`` -- 2-GRPO pair advantages and gradient weights (09)
* ``grpo_lessons.course.viz.comparison`` -- a variant against GRPO at an equal rollout budget, no widgets (06-10)
* ``grpo_lessons.course.viz.rewards`` -- reward hacking, GDPO, GOPO, entropy and diversity (04, 15-18)
* ``grpo_lessons.course.viz.offpolicy`` -- train/inference mismatch, VESPO, DPPO, CISPO, scaling fits (11-14)
* ``grpo_lessons.course.viz.lab`` -- a lab claim run live, its figures and widget, the committed claims table (06-18, 20)
* ``grpo_lessons.course.viz.study`` -- a committed study read back: the table with t-intervals and paired
  differences, learning curves with seed bands, a widget that overlays them (20, and the last cells of 06-10)

Training curves (the live plot of notebook 05 and the command line's saved PNG) live one layer down, in
:mod:`grpo_lessons.training.plots`: the trainer needs no widgets.  A new notebook family adds a module here
rather than growing an existing one.
"""
