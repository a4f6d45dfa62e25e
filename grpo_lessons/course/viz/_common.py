"""Plumbing shared by every widget module: lazy matplotlib, the ``interactive`` wrapper, controls whose labels fit.

Not for notebooks.  Each control gets ``description_width`` wide enough for the longest label of its widget
(one column of right-aligned labels, so tracks and buttons line up) and a layout wide enough for label, track
and readout: ipywidgets' default 300 px box would otherwise shrink the label to ``max_com…``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["_plt", "_interactive", "_int_slider", "_float_slider", "_log_slider", "_dropdown", "_toggle",
           "_grad_1d", "_generator"]

_TRACK_PX = 330  # slider track + readout


def _plt():
    import matplotlib.pyplot as plt  # imported lazily: the package's tensor code never needs it

    return plt


def _label_px(controls) -> int:
    """Pixels for the longest description among ``controls`` (about 8 px per character at JupyterLab's 13 px)."""
    longest = max((len(getattr(c, "description", "") or "") for c in controls), default=0)
    return 8 * longest + 12


def _align(controls) -> None:
    """Give every control of one widget the same label column, wide enough for the longest label."""
    px = _label_px(controls)
    for c in controls:
        if not hasattr(c, "style") or not hasattr(c.style, "description_width"):
            continue
        c.style.description_width = f"{px}px"
        if c.__class__.__name__.endswith("Slider"):
            c.layout.width = f"{px + _TRACK_PX}px"
        elif c.__class__.__name__ == "Dropdown":
            c.layout.width = f"{px + 200}px"


def _interactive(draw, compute, **controls):
    """``ipywidgets.interactive`` around ``draw(compute(**kw))``; the widget's ``.result`` is the dict."""
    import ipywidgets as widgets

    plt = _plt()
    _align([c for c in controls.values() if isinstance(c, widgets.Widget)])

    def _update(**kw):
        data = compute(**kw)
        fig = draw(data)
        plt.show()  # inline backend: displays into the widget's output; Agg: a no-op
        plt.close(fig)
        return data

    return widgets.interactive(_update, **controls)


def _int_slider(value, lo, hi, step=1, desc=""):
    import ipywidgets as widgets

    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=desc or "",
                             continuous_update=False, style={"description_width": "initial"})


def _float_slider(value, lo, hi, step, desc="", fmt=".2f"):
    import ipywidgets as widgets

    return widgets.FloatSlider(value=value, min=lo, max=hi, step=step, description=desc or "",
                               continuous_update=False, readout_format=fmt, style={"description_width": "initial"})


def _log_slider(value, lo, hi, desc=""):
    import ipywidgets as widgets

    return widgets.FloatLogSlider(value=value, base=10, min=math.log10(lo), max=math.log10(hi), step=0.1,
                                  description=desc, continuous_update=False, readout_format=".3r",  # 63.1, 0.100, 1000
                                  style={"description_width": "initial"})


def _dropdown(options, value, desc=""):
    import ipywidgets as widgets

    return widgets.Dropdown(options=list(options), value=value, description=desc,
                            style={"description_width": "initial"})


def _toggle(options, value, desc=""):
    """Toggle buttons whose label sits in the same column as the sliders' labels."""
    import ipywidgets as widgets

    return widgets.ToggleButtons(options=list(options), value=value, description=desc,
                                 style={"description_width": "initial", "button_width": "6em"})


def _grad_1d(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value and elementwise derivative of ``fn`` (pointwise in ``x``), by autograd in float64."""
    x = x.detach().to(torch.float64).requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))
