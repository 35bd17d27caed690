"""The engine benchmarks' shared workload and yardsticks (``bench_engine.py``, ``engine_profiles.py``,
``ab_engine.py``, ``bench_gpu.py``, ``bench_stacking.py``).

The workload: each party's ~3,000 days of its own synthetic prices (:func:`synthetic_panel`: 9
correlated GBM assets, seeded), at the paper's scale of :data:`PAPER_PARTY_STEPS` party-steps (50
parties × 800 rounds × 50 local iterations).  The yardsticks: party-steps per second (:func:`rate`), a
call's wall time at a number of torch threads (:func:`timed`), the machine's float32 matrix-product rate
(:func:`machine_gflops`) and the flops of one party-step counted from the EIIE's layers
(:func:`party_step_flops`), the process's memory (:func:`rss_mib`, :func:`max_rss_mib`).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from portfed.agents import AgentConfig
from portfed.data.panel import PricePanel

PAPER_PARTY_STEPS = 50 * 800 * 50
N_ASSETS, TRAIN_DAYS = 9, 3000


def synthetic_panel(seed: int, ohlc: bool) -> PricePanel:
    """3,000 training days (+ one window) of 9 correlated GBM assets; high/low around the close."""
    rng = np.random.default_rng(seed)
    n = TRAIN_DAYS + 31
    mix = rng.normal(0.0, 1.0, (N_ASSETS, N_ASSETS)) / np.sqrt(N_ASSETS)
    shocks = rng.standard_normal((n, N_ASSETS)) @ mix.T
    close = 100.0 * np.exp(np.cumsum(2e-4 + 0.015 * shocks, axis=0))
    dates = pd.bdate_range("2006-01-02", periods=n)
    tickers = tuple(f"P{seed}A{i}" for i in range(N_ASSETS))
    if not ohlc:
        return PricePanel(close[:, :, None], dates, tickers, ("close",))
    spread = 1.0 + 0.01 * np.abs(rng.standard_normal((n, N_ASSETS)))
    return PricePanel(np.stack([close, close * spread, close / spread], axis=-1), dates, tickers,
                      ("close", "high", "low"))


def rate(party_steps: int, seconds: float) -> float:
    return party_steps / seconds


def fmt_duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def rss_mib() -> float:
    """Resident memory now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


THREADS = (1, 2)


def machine_gflops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """The machine's float32 matrix-product rate at ``threads`` torch threads: ``2n³`` flops of one
    ``n × n`` product (n = 2048), best of ``repeats`` — the yardstick every figure's share is taken of."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(timed(lambda: torch.mm(a, b), threads) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def party_step_flops(config: AgentConfig, assets: int = N_ASSETS) -> float:
    """Flops of one party-step of the EIIE's forward and backward passes, counted from the layers: the
    forward pass's multiply-adds (the convolutions or the recurrence and its input projection, the
    score head), ×3 for forward + backward (the backward forms two products per forward one), ×2
    flops per multiply-add.  The softmax, reward, Adam and bookkeeping are left out (a few per cent)."""
    rows = config.batch_size * assets
    head = rows * (1 + (config.dense_maps if config.network == "cnn" else config.hidden_size))
    if config.network == "cnn":
        width = config.window - 2
        trunk = rows * (width * config.conv_maps * config.n_features * 3 + config.dense_maps * config.conv_maps * width)
    else:
        gates = (1 if config.network == "rnn" else 4) * config.hidden_size
        trunk = rows * config.window * gates * (config.hidden_size + config.n_features)
    return 3 * 2 * (trunk + head)


def share(rate_per_s: float, config: AgentConfig, peak_gflops: float) -> str:
    """``rate_per_s`` party-steps/s as GFLOPS and as a share of the machine's matmul rate."""
    gflops = rate_per_s * party_step_flops(config) / 1e9
    return f"{gflops:.1f} GFLOPS = {100 * gflops / peak_gflops:.0f} % of the machine's {peak_gflops:.0f}"


def timed(fn: Callable[[], None], threads: int) -> float:
    """Seconds one call of ``fn`` takes at ``threads`` torch threads."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
