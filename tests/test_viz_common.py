"""Every widget of every viz module: labels fit (no ``max_com…``), controls line up."""

import inspect

import pytest

from grpo_lessons.course.viz import advantages, clipping, length, offpolicy, pairwise, rewards
from grpo_lessons.course.viz._common import _align, _float_slider, _int_slider, _toggle

MODULES = (advantages, clipping, length, pairwise, offpolicy, rewards)
WIDGETS = [(m.__name__.rsplit(".", 1)[-1], n) for m in MODULES for n in m.__all__
           if n.endswith("_widget") and not any(p.default is inspect.Parameter.empty
                                                for p in inspect.signature(getattr(m, n)).parameters.values())]


def _px(width: str) -> int:
    assert width.endswith("px"), width
    return int(width[:-2])


def test_align_gives_one_label_column_wide_enough_for_the_longest_label():
    a = _int_slider(1, 0, 10, 1, "max_completion_length")
    b = _float_slider(0.2, 0.0, 1.0, 0.1, "p")
    c = _toggle(["A > 0", "A < 0"], "A > 0", "sign of A")
    _align([a, b, c])
    widths = {_px(w.style.description_width) for w in (a, b, c)}
    assert len(widths) == 1  # the same column for every control: tracks and buttons line up
    (w,) = widths
    assert w >= 7 * len("max_completion_length")  # JupyterLab's 13 px font: about 7 px a character
    assert _px(a.layout.width) >= w + 250  # room left for the track and the readout
    assert c.layout.width is None  # toggle buttons keep their own width


@pytest.mark.parametrize("module,name", WIDGETS)
def test_every_widget_label_fits(module, name):
    w = getattr(globals()[module], name)()
    controls = [c for c in w.children if getattr(c, "description", "")]
    assert controls, f"{name} has no labelled control"
    for c in controls:
        width = _px(c.style.description_width)
        assert width >= 7 * len(c.description), (name, c.description, width)
        if type(c).__name__.endswith("Slider"):
            assert _px(c.layout.width) >= width + 250, (name, c.description, c.layout.width)


def test_widget_list_covers_the_notebook_widgets():
    names = {n for _, n in WIDGETS}
    for expected in ("clip_widget", "kl_widget", "normalisation_widget", "sapo_widget", "clip_higher_widget",
                     "length_weight_widget", "pair_widget", "advantage_widget", "gradient_variance_widget"):
        assert expected in names


