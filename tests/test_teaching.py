"""The teaching helper notebooks use: ``cmp``."""

import pytest
import torch

from grpo_lessons.course.teaching import cmp


def test_cmp_reports_exact_approx_and_maxdiff(capsys):
    a = torch.tensor([1.0, 2.0, 3.0])
    assert cmp("same", a, a.clone()).exact
    r = cmp("close", a.double(), a.double() + 1e-8)
    assert r and not r.exact and r.maxdiff == pytest.approx(1e-8, rel=1e-3)
    r = cmp("far", a, a + 0.1)
    assert not r and r.maxdiff == pytest.approx(0.1)
    r = cmp("shape", a, a[:2])
    assert not r and not r.shape_ok
    out = capsys.readouterr().out
    assert "exact: True" in out and "approx: False" in out and "shapes differ" in out
    assert cmp("nan", [float("nan"), 1.0], [float("nan"), 1.0], quiet=True).exact

