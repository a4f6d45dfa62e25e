"""Widgets and plots.  Each module pairs a *pure* function that computes what is drawn (unit tested,
no display needed) with a thin ipywidgets wrapper.  Import from the submodules:
``grpo_lessons.viz.core`` (notebooks 01-03), ``grpo_lessons.viz.variants`` (06-10),
``grpo_lessons.viz.training`` (04, 16-17)."""
