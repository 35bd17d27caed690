"""The batched engine on a CUDA device: party-steps/s at K = 50 and K = 1,000 (issue 15's GPU section).

Usage: ``.venv/bin/python benchmarks/bench_gpu.py [--steps 50] [--parties 50 1000] [--device cuda]``.  On
a machine without CUDA it says so and exits 0 (``make bench`` runs it everywhere; CI and the 2-core
machine have no GPU).  ``--device cpu --parties 3 --steps 2`` runs the same code on the CPU in seconds
(``tests/test_device.py`` does, so the GPU section cannot rot unseen on machines without one).

Same shapes as ``bench_engine.py``: CNN EIIE on close/high/low, 9 assets, window 30, batch 50, 3,000
training days per party of seeded correlated GBM.  One warm-up call, then the best of three timed
``BatchedDPGTrainer.train`` calls of ``--steps`` local iterations per party, synchronized.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import PAPER_PARTY_STEPS, fmt_duration, synthetic_panel  # noqa: E402

from portfed.agents import AgentConfig  # noqa: E402
from portfed.agents.batched import BatchedDPGTrainer  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels (CUDA launches return before the work is done)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def party_steps_per_second(k: int, steps: int, device: str = "cuda") -> float:
    """The batched engine's party-steps/s for ``k`` parties: the best of three ``steps``-step calls."""
    config = AgentConfig(features=("close", "high", "low"), device=device)
    engine = BatchedDPGTrainer(config, [synthetic_panel(seed, True) for seed in range(k)], list(range(k)))

    def call(n: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=n, start=None))
        synchronize(device)
        return time.perf_counter() - start

    call(2)
    return k * steps / min(call(steps) for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50, help="local iterations per party per timed call")
    parser.add_argument("--parties", type=int, nargs="+", default=[50, 1000], help="the K to measure")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, to check the script itself")
    args = parser.parse_args()
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("no CUDA device: the GPU section is skipped (agent.device: auto trains on the CPU here)")
            return
        print(f"CUDA device: {torch.cuda.get_device_name(0)}")
    for k in args.parties:
        rate = party_steps_per_second(k, args.steps, args.device)
        print(f"batched engine on {args.device}, K = {k:>4}: {rate:,.0f} party-steps/s; the paper's 2M party-steps "
              f"would take {fmt_duration(PAPER_PARTY_STEPS / rate)}")


if __name__ == "__main__":
    main()
