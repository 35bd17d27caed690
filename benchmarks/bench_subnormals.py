"""The recurrence kernels on gradients that underflow: a saturated policy's backward pass.

Usage: ``.venv/bin/python benchmarks/bench_subnormals.py [--repeats 5]``.

A party whose policy has gone to cash (the softmax's other shares near e^−30) backpropagates a gradient
``∂h_l`` of about 1e−30 into the day loops, and 30 days of ``W_hhᵀ δ_j`` products shrink it further into
subnormal floats (|x| < 1.2e−38).  On x86 every operation on a subnormal operand takes a microcode assist
of about a hundred cycles unless the flush-to-zero bits are set, which the kernels do while they run
(``portfed/agents/vectors.h``, ``OVER_PARTIES``).  This script times the Elman and the LSTM backward pass
of K = 50 parties (B = 50 days × 9 assets, window 30, hidden size 20, one thread, best of ``--repeats``)
from the same forward pass, once with ``∂h_l`` of normal size (N(0, 1e−3²)) and once scaled by 1e−28 so
that its products underflow on the way down, and prints both times and their ratio.  With the flush the
ratio is about 1; the kernels of a commit before it (run this script from that checkout, as
``benchmarks/ab_engine.py`` says) show the assists' cost.

It imports portfed from the path, so one copy of it times any checkout.
"""

from __future__ import annotations

import argparse
import time

import torch

import portfed
from portfed.agents.native import NativeBuildError, recurrence_kernels

K, B, ASSETS, WINDOW, HIDDEN = 50, 50, 9, 30, 20
GATES = {"rnn": 1, "lstm": 4}


def backward_seconds(cell: str, scale: float, repeats: int) -> float:
    """Best of ``repeats`` backward passes of K parties from one forward pass, ``∂h_l`` ~ N(0, 1e−3²) × scale."""
    try:
        kernels = recurrence_kernels(HIDDEN)
    except NativeBuildError as error:
        raise SystemExit(f"this benchmark needs the C kernels: {error}") from None
    generator = torch.Generator().manual_seed(0)
    g, r = GATES[cell] * HIDDEN, B * ASSETS
    x = 1 + 0.01 * torch.randn(K, 1, WINDOW, r, generator=generator)
    w_ih = 0.3 * torch.randn(K, g, 1, generator=generator)
    bias = 0.1 * torch.randn(K, g, generator=generator)
    w_hh = 0.3 * torch.randn(K, g, HIDDEN, generator=generator) / HIDDEN**0.5
    grad_h = 1e-3 * torch.randn(K, HIDDEN, r, generator=generator) * scale
    best = float("inf")
    for _ in range(repeats + 1):  # the first call is a warm-up
        _, saved = kernels.forward(cell, x, w_ih, bias, w_hh)
        start = time.perf_counter()
        kernels.backward(cell, x, w_hh, saved, grad_h)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"portfed from {portfed.__file__}; K = {K}, B = {B}, {ASSETS} assets, window {WINDOW}, hidden {HIDDEN}, "
          f"one thread, best of {args.repeats}")
    for cell in GATES:
        normal = backward_seconds(cell, 1.0, args.repeats)
        tiny = backward_seconds(cell, 1e-28, args.repeats)
        print(f"  {cell.upper():4s} backward pass: ∂h_l normal {normal * 1e3:7.1f} ms, underflowing "
              f"{tiny * 1e3:7.1f} ms, ratio {tiny / normal:.2f}")


if __name__ == "__main__":
    main()
