"""Exercises of the curriculum, one module per notebook (``nbNN.py``); see :mod:`grpo_lessons.course.exercises`."""
