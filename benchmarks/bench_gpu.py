"""The batched engine on a CUDA device: party-steps/s at K = 50 and K = 1,000 for the CNN, RNN and LSTM EIIEs.

Usage: ``.venv/bin/python benchmarks/bench_gpu.py [--steps 50] [--parties 50 1000] [--networks cnn rnn lstm]
[--device cuda]``.  On a machine without CUDA it says so and exits 0 (``make bench`` runs it everywhere; CI
and the 2-core machine have no GPU).  ``--device cpu --parties 3 --steps 2`` runs the same code on the CPU in
seconds (``tests/test_device.py`` does, so the GPU section cannot rot unseen on machines without one).

Same shapes as ``bench_engine.py``: 9 assets, window 30, batch 50, 3,000 training days per party of seeded
correlated GBM; the CNN on close/high/low, the recurrent EIIEs on closes.  One warm-up call, then the best
of three timed ``BatchedDPGTrainer.train`` calls of ``--steps`` local iterations per party, synchronized.

On CUDA each figure also gets a profile of one call (``torch.profiler``): the GPU kernels launched per
local step and the share of the step's wall time the GPU spends in them.  A low share with a step time
that hardly grows from K = 50 to K = 1,000 means the step is bound by launching kernels, not by the GPU's
arithmetic — the case for capturing the step in a CUDA graph.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_workload import PAPER_PARTY_STEPS, fmt_duration, synthetic_panel  # noqa: E402

from portfed.agents import AgentConfig  # noqa: E402
from portfed.agents.batched import BatchedDPGTrainer  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels (CUDA launches return before the work is done)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def engine_for(network: str, k: int, device: str) -> BatchedDPGTrainer:
    """``k`` parties of ``network``: the CNN on close/high/low, the recurrent EIIEs on closes."""
    ohlc = network == "cnn"
    config = AgentConfig(network=network, features=("close", "high", "low") if ohlc else ("close",), device=device)
    return BatchedDPGTrainer(config, [synthetic_panel(seed, ohlc) for seed in range(k)], list(range(k)))


def timed_call(engine: BatchedDPGTrainer, steps: int, device: str) -> float:
    """Seconds of one ``steps``-step local call of every party, synchronized."""
    k = engine.n_parties
    synchronize(device)
    start = time.perf_counter()
    engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=np.full(k, steps), start=None))
    synchronize(device)
    return time.perf_counter() - start


def party_steps_per_second(network: str, k: int, steps: int, device: str = "cuda") -> tuple[float, BatchedDPGTrainer]:
    """The batched engine's party-steps/s for ``k`` parties: the best of three ``steps``-step calls."""
    engine = engine_for(network, k, device)
    timed_call(engine, 2, device)
    return k * steps / min(timed_call(engine, steps, device) for _ in range(3)), engine


def kernel_profile(engine: BatchedDPGTrainer, steps: int) -> tuple[float, float]:
    """``(kernels per step, GPU-busy share of the wall time)`` of one ``steps``-step call under
    ``torch.profiler`` (the profiler's own overhead lengthens the wall time a little)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        wall = timed_call(engine, steps, "cuda")
    kernels = [e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.time_range.elapsed_us() for e in kernels) * 1e-6
    return len(kernels) / steps, busy / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50, help="local iterations per party per timed call")
    parser.add_argument("--parties", type=int, nargs="+", default=[50, 1000], help="the K to measure")
    parser.add_argument("--networks", nargs="+", default=["cnn", "rnn", "lstm"], choices=["cnn", "rnn", "lstm"])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, to check the script itself")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            print("no CUDA device: the GPU section is skipped (agent.device: auto trains on the CPU here)")
            return
        print(f"CUDA device: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}")
    for network in args.networks:
        for k in args.parties:
            rate, engine = party_steps_per_second(network, k, args.steps, args.device)
            line = (f"batched {network.upper()} engine on {args.device}, K = {k:>4}: {rate:,.0f} party-steps/s "
                    f"({1e3 * k / rate:.2f} ms per step); the paper's 2M party-steps would take "
                    f"{fmt_duration(PAPER_PARTY_STEPS / rate)}")
            if cuda:
                kernels, busy = kernel_profile(engine, min(args.steps, 10))
                line += f"; {kernels:.0f} kernels per step, GPU busy {100 * busy:.0f} % of the step"
            print(line, flush=True)
            del engine
            if cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
