"""Layer 4, course: what the notebooks use.  Extra ``[course]`` (matplotlib, ipywidgets, jupyterlab).

Widgets and plots (:mod:`grpo_lessons.course.viz`), the exercise registry (:mod:`grpo_lessons.course.exercises`)
and the comparison helpers of the notebooks (:mod:`grpo_lessons.course.teaching`).  May import from every layer.
"""
