"""ScaleRL's sigmoid compute curve: the closed form, and a fit that recovers known parameters."""

import math

import numpy as np
import pytest

from grpo_lessons.core.scaling_law import fit_sigmoid, sigmoid_curve


def test_curve_closed_form_points():
    A, R0, C_mid, B = 0.8, 0.2, 1000.0, 1.5
    # at C = C_mid half of the gain is made; far left R0, far right A
    assert sigmoid_curve([C_mid], A, R0, C_mid, B)[0] == pytest.approx(0.5)
    assert sigmoid_curve([1e-6], A, R0, C_mid, B)[0] == pytest.approx(R0, abs=1e-9)
    assert sigmoid_curve([1e12], A, R0, C_mid, B)[0] == pytest.approx(A, abs=1e-9)
    # at C = 2 C_mid: (C_mid/C)^B = 2^-1.5
    assert sigmoid_curve([2 * C_mid], A, R0, C_mid, B)[0] == pytest.approx(R0 + (A - R0) / (1 + 2 ** -1.5))
    with pytest.raises(ValueError):
        sigmoid_curve([0.0, 1.0], A, R0, C_mid, B)
    with pytest.raises(ValueError):
        sigmoid_curve([1.0], A, R0, -1.0, B)


@pytest.mark.parametrize("A,R0,C_mid,B", [(0.65, 0.23, 800.0, 1.2), (0.9, 0.1, 5e4, 0.7), (0.5, 0.3, 50.0, 3.0)])
def test_fit_recovers_parameters_noise_free(A, R0, C_mid, B):
    C = np.geomspace(C_mid / 30, C_mid * 30, 40)
    R = sigmoid_curve(C, A, R0, C_mid, B)
    fit = fit_sigmoid(C, R, R0=R0)
    assert fit.A == pytest.approx(A, rel=1e-4)
    assert fit.C_mid == pytest.approx(C_mid, rel=1e-3)
    assert fit.B == pytest.approx(B, rel=1e-3)
    assert fit.rmse < 1e-6
    free = fit_sigmoid(C, R, fit_R0=True)
    assert free.R0 == pytest.approx(R0, abs=1e-4) and free.A == pytest.approx(A, abs=1e-4)


def test_fit_recovers_parameters_from_noisy_rewards():
    rng = np.random.default_rng(0)
    A, R0, C_mid, B = 0.7, 0.25, 2000.0, 1.5
    C = np.linspace(64, 64 * 300, 300)  # 300 steps of 64 completions, like a training log
    R = sigmoid_curve(C, A, R0, C_mid, B) + rng.normal(0, 0.03, C.shape)
    fit = fit_sigmoid(C, R, R0=R0)
    assert fit.A == pytest.approx(A, abs=0.02)
    assert fit.C_mid == pytest.approx(C_mid, rel=0.15)
    assert fit.B == pytest.approx(B, rel=0.25)
    assert fit.rmse == pytest.approx(0.03, rel=0.15)
    assert np.allclose(fit(C), sigmoid_curve(C, fit.A, fit.R0, fit.C_mid, fit.B))


def test_fit_is_independent_of_the_order_of_points():
    C = np.geomspace(10, 1e4, 25)
    R = sigmoid_curve(C, 0.6, 0.2, 300.0, 1.0)
    perm = np.random.default_rng(1).permutation(len(C))
    a, b = fit_sigmoid(C, R), fit_sigmoid(C[perm], R[perm])
    assert a.R0 == b.R0 == pytest.approx(0.2 + 0.4 / (1 + 30 ** 1.0))  # R0 = reward at the smallest C
    assert math.isclose(a.A, b.A, rel_tol=1e-6) and math.isclose(a.C_mid, b.C_mid, rel_tol=1e-5)


def test_fit_bad_input():
    with pytest.raises(ValueError):
        fit_sigmoid([1, 2, 3], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError):
        fit_sigmoid([1, 2, 3, 4], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError):
        fit_sigmoid([1, 2, 3, 4], [0.1, float("nan"), 0.3, 0.4])
    with pytest.raises(ValueError):
        fit_sigmoid([0, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
