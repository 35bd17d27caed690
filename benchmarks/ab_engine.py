"""The training engine alone, for same-run comparisons of two commits (the A/B figures of docs/reports/performance.md).

Times ``BatchedDPGTrainer.train`` — no per-party reference, no profile — on ``engine_workload.py``'s synthetic
parties (9 assets, window 30, batch 50) at K = 10 and K = 50, two threads, best of ``--repeats``, and
prints one line per call: the portfed it imported, then party-steps/s per network and K.  It imports
portfed from the path, so one copy of this script times any checkout; alternate the two in one session
on an idle machine::

    git worktree add /tmp/before <commit>
    for i in 1 2; do
        (cd /tmp/before && PYTHONPATH=. /path/to/.venv/bin/python /path/to/benchmarks/ab_engine.py)
        (cd /path/to/portfed && .venv/bin/python benchmarks/ab_engine.py)
    done

Networks: ``cnn`` on closes and on close/high/low (50 steps a call), ``rnn`` (20) and ``lstm`` (6) on closes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from engine_workload import synthetic_panel  # this script's directory is first on the path

import portfed
from portfed.agents import AgentConfig
from portfed.agents.batched import BatchedDPGTrainer
from portfed.federation import CohortPlan

#: (label, network, features, local steps per timed call)
CASES = {"cnn": [("CNN closes", "cnn", ("close",), 50), ("CNN close/high/low", "cnn", ("close", "high", "low"), 50)],
         "rnn": [("RNN", "rnn", ("close",), 20)], "lstm": [("LSTM", "lstm", ("close",), 6)]}


def rate(config: AgentConfig, k: int, steps: int, repeats: int) -> float:
    """Party-steps/s of one ``train`` call of K parties × ``steps``, best of ``repeats`` after a warm-up call."""
    ohlc = len(config.features) > 1
    trainer = BatchedDPGTrainer(config, [synthetic_panel(seed, ohlc) for seed in range(k)], list(range(k)))

    def call(n: int) -> float:
        start = time.perf_counter()
        trainer.train(CohortPlan(round_index=0, parties=np.arange(k), steps=n, start=None))
        return time.perf_counter() - start

    call(2)
    return k * steps / min(call(steps) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", choices=list(CASES), default=["cnn"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    figures = [str(Path(portfed.__file__).resolve().parents[1])]
    for network in args.networks:
        for label, name, features, steps in CASES[network]:
            config = AgentConfig(network=name, features=features)
            figures += [f"{label} K={k}: {rate(config, k, steps, args.repeats):,.0f}" for k in (10, 50)]
    print(" | ".join(figures), flush=True)


if __name__ == "__main__":
    main()
