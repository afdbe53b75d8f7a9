#!/usr/bin/python3
"""Fits the coefficients of the kernel prelude's float32 exp and tanh (kernels/render_prelude.cpp).

  exp:  e^r ~ 1 + c1 r + ... + c5 r^5 on |r| <= ln2/2 (p(0) = 1 exactly), minimising relative error.
  tanh: tanh(t) ~ t P(t^2) / Q(t^2), P and Q of degree 4, Q(0) = 1, on 0 < t <= 7.905 (where tanh
        rounds to 1 in float), minimising relative error.

Both use iteratively reweighted least squares towards the minimax (Lawson's algorithm; for the
rational fit, each step linearises with the previous denominator, as Loeb's method). The printed
float32 error evaluates the fit as the kernels do: float32 coefficients, Horner with fused
multiply-adds. The kernels' measured error over every float is checked by
tests/jit/math_accuracy_test.cpp.

Usage: tools/fit_math.py [exp|tanh]...
"""
import sys

import numpy as np

F = np.float32
TANH_ONE = 7.90531110763549805


def horner_fma(coeffs, x):
    """sum coeffs[i] x^i in float32, one rounding per multiply-add (as an FMA)."""
    acc = np.full(x.shape, coeffs[-1], dtype=np.float32)
    for c in reversed(coeffs[:-1]):
        acc = (acc.astype(np.float64) * x + np.float64(c)).astype(np.float32)
    return acc


def lawson(design, target, rounds):
    """Weighted least squares design @ c ~ target, reweighted towards the minimax; best round wins."""
    w = np.ones(len(target))
    best = None
    for _ in range(rounds):
        sol, *_ = np.linalg.lstsq(design * w[:, None], target * w, rcond=None)
        err = np.abs(design @ sol - target)
        if best is None or err.max() < best[0]:
            best = (err.max(), sol)
        w = w * (1 + 2 * err / err.max())
    return best


def fit_exp():
    h = np.log(2) / 2 * 1.01  # a little past ln2/2: n is rounded in float
    x = np.cos(np.linspace(0, np.pi, 20001)) * h
    x = x[np.abs(x) > 1e-9]
    t = np.exp(x)
    # relative error: (1 + sum c_i x^i - t) / t, linear in c
    design = np.stack([x**i / t for i in range(1, 6)], 1)
    err, sol = lawson(design, (t - 1) / t, 80)
    coeffs = [F(1.0)] + [F(c) for c in sol]
    xf = np.linspace(-h, h, 400001).astype(np.float32)
    ref = np.exp(xf.astype(np.float64))
    got = horner_fma(coeffs, xf).astype(np.float64)
    print("exp: fit %.3g, float32 max rel error %.3g" % (err, (np.abs(got - ref) / ref).max()))
    print("  p(r) coefficients, degree 0 to 5:", ", ".join("%.10e" % c for c in coeffs))


def fit_tanh(p=4, q=4):
    x = np.concatenate([np.linspace(1e-4, TANH_ONE, 60000), np.linspace(1e-4, 1.5, 20000)])
    t, z = np.tanh(x), x * x
    q_prev, w = np.ones_like(x), np.ones_like(x)
    best = None
    for _ in range(60):
        # (x P(z) - t Q(z)) / (t Q_prev(z)) with Q = 1 + sum b_j z^j: linear in (a, b)
        design = np.concatenate([np.stack([x * z**i for i in range(p + 1)], 1),
                                 np.stack([-t * z**j for j in range(1, q + 1)], 1)], 1)
        scale = w / (t * q_prev)
        sol, *_ = np.linalg.lstsq(design * scale[:, None], t * scale, rcond=None)
        a, b = sol[:p + 1], np.concatenate([[1.0], sol[p + 1:]])
        P = sum(a[i] * z**i for i in range(p + 1))
        q_prev = sum(b[j] * z**j for j in range(q + 1))
        err = np.abs(x * P / q_prev - t) / t
        if best is None or err.max() < best[0]:
            best = (err.max(), a, b)
        w = w * (1 + err / err.max()) ** 0.5
    rel, a, b = best
    pa, qb = [F(v) for v in a], [F(v) for v in b]
    xf = np.linspace(1e-6, 8.5, 3000001).astype(np.float32)
    tc = np.minimum(xf, F(TANH_ONE))
    zf = (tc.astype(np.float64) ** 2).astype(np.float32)
    ratio = (horner_fma(pa, zf).astype(np.float64) / horner_fma(qb, zf)).astype(np.float32)
    got = (tc.astype(np.float64) * ratio).astype(np.float32).astype(np.float64)
    ref = np.tanh(xf.astype(np.float64))
    print("tanh [%d/%d]: fit %.3g, float32 max rel error %.3g" % (2 * p + 1, 2 * q, rel,
                                                                 (np.abs(got - ref) / ref).max()))
    print("  P, degree 0 to %d:" % p, ", ".join("%.9e" % c for c in pa))
    print("  Q, degree 0 to %d:" % q, ", ".join("%.9e" % c for c in qb))


if __name__ == "__main__":
    which = sys.argv[1:] or ["exp", "tanh"]
    for name in which:
        {"exp": fit_exp, "tanh": fit_tanh}[name]()
