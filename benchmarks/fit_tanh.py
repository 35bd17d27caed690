"""The coefficients of the fused kernels' tanh (``vtanh`` in ``portfed/agents/recurrence.c``), refitted.

Usage: ``.venv/bin/python benchmarks/fit_tanh.py [--numerator 6] [--denominator 3] [--clamp 9]``.

tanh x = x P(x²) / Q(x²) on [0, c] with c = 9 (tanh 9 rounds to 1 in float32; the kernel clamps |x| there):
P of degree ``--numerator`` and Q of degree ``--denominator`` in x², Q(0) = 1.  The fit minimises the maximum
relative error by Lawson's iteratively reweighted least squares on the linearised residual
(x P − tanh(x) Q) / (tanh(x) Q_previous), in the scaled variable u = x² / c² (the powers of x² up to 81⁶ make
the unscaled system ill-conditioned); 300 iterations, the best one kept.  It prints the approximation's
relative error in double, the coefficients as the C literals of the kernel (float32, 10 significant digits),
and the error of the kernel's float32 evaluation — Horner with fused multiply-adds, a · P · (1/Q), min with
1 — emulated in NumPy on a dense grid, in ulps of the exact value.  The default degrees print the shipped
coefficients: relative error 6.6e-9 in double, at most 5.0 ulp (0.74 on average) in float32, the
rounding of the two Horner evaluations dominating.
"""

from __future__ import annotations

import argparse

import numpy as np

F32 = np.float32


def fit(numerator: int, denominator: int, clamp: float, iterations: int = 300) -> tuple[np.ndarray, np.ndarray, float]:
    """P (numerator + 1 coefficients, ascending in x²) and Q (Q[0] = 1), and their maximum relative error."""
    x = np.concatenate([np.linspace(0, 1, 3000)[1:], np.linspace(1, clamp, 6000)])
    u, t = x * x / clamp**2, np.tanh(x)
    basis_p = np.stack([x * u**k for k in range(numerator + 1)], 1)
    basis_q = np.stack([t * u**k for k in range(1, denominator + 1)], 1)
    q_previous, weights = np.ones_like(x), np.full_like(x, 1 / x.size)
    best_error, best = np.inf, (np.zeros(numerator + 1), np.zeros(denominator + 1))
    for _ in range(iterations):
        scale = np.sqrt(weights) / (t * q_previous)
        solution, *_ = np.linalg.lstsq(np.hstack([basis_p, -basis_q]) * scale[:, None], t * scale, rcond=None)
        p, q = solution[: numerator + 1], np.concatenate([[1.0], solution[numerator + 1 :]])
        q_previous = np.polyval(q[::-1], u)
        error = (x * np.polyval(p[::-1], u) / q_previous - t) / t
        if np.abs(error).max() < best_error:
            best_error, best = float(np.abs(error).max()), (p.copy(), q.copy())
        weights = weights * np.abs(error)
        weights /= weights.sum()
    p, q = best
    return p / clamp ** (2 * np.arange(numerator + 1)), q / clamp ** (2 * np.arange(denominator + 1)), best_error


def _fma(a: np.ndarray, b: np.ndarray | F32, c: np.ndarray | F32) -> np.ndarray:
    """a · b + c rounded once to float32 (the product of two float32 is exact in double)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


def kernel_tanh(x: np.ndarray, p: np.ndarray, q: np.ndarray, clamp: float) -> np.ndarray:
    """The kernel's float32 evaluation, operation by operation, with 1/Q correctly rounded (the kernel's rcp14 and
    Newton step are within an ulp of it: the two evaluations agree within 2 ulp)."""
    p32, q32 = p.astype(F32), q.astype(F32)
    a = np.minimum(np.abs(x), F32(clamp)).astype(F32)
    s = (a * a).astype(F32)
    num = _fma(s, p32[-1], p32[-2])
    for c in p32[-3::-1]:
        num = _fma(s, num, c)
    den = _fma(s, q32[-1], q32[-2])
    for c in q32[-3::-1]:
        den = _fma(s, den, c)
    t = np.minimum(((a * num).astype(F32) * (1 / den.astype(np.float64)).astype(F32)).astype(F32), F32(1))
    return np.copysign(t, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numerator", type=int, default=6, help="degree of P in x²")
    parser.add_argument("--denominator", type=int, default=3, help="degree of Q in x²")
    parser.add_argument("--clamp", type=float, default=9.0, help="|x| beyond which tanh is ±1")
    args = parser.parse_args()
    p, q, error = fit(args.numerator, args.denominator, args.clamp)
    print(f"maximum relative error in double on [0, {args.clamp:g}]: {error:.2e}")
    print("P (ascending in x²):", ", ".join(f"{F32(c):.9e}f" for c in p))
    print("Q (ascending in x²):", ", ".join(f"{F32(c):.9e}f" for c in q))
    x = np.concatenate([np.linspace(-10, 10, 4_000_001), np.geomspace(1e-30, 1, 200_001)]).astype(F32)
    exact = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(F32)).astype(np.float64)
    ulps = np.abs(kernel_tanh(x, p, q, args.clamp) - exact) / ulp
    print(f"float32 evaluation: at most {ulps.max():.2f} ulp (at x = {x[ulps.argmax()]:.6g}), "
          f"{ulps.mean():.2f} on average, over {x.size:,} points of [-10, 10] and [1e-30, 1]")


if __name__ == "__main__":
    main()
