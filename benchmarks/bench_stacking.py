"""Two runs at once on the CPU: stack their parties into one batched computation, or run two processes?

Usage: ``.venv/bin/python benchmarks/bench_stacking.py [--parties 50] [--steps 100] [--repeats 3]``.

A comparison of two algorithms at the paper's shapes trains 2 × 50 parties (CNN EIIE, 9 assets,
window 30, batch 50; the synthetic panels of ``engine_workload.py``).  Three ways to do it, each timed
for ``--steps`` local iterations of every party (best of ``--repeats``), reported as party-steps/s of
the two runs together:

* ``one after another``: one engine of K parties with the machine's threads, twice;
* ``stacked``: one engine of 2K parties (both runs' parties as rows of one batched computation) with
  the machine's threads;
* ``two processes``: two engines of K parties in two processes running at the same time, each with
  ``threads // 2`` threads (what ``portfed compare --jobs 2`` does).

The last line names the fastest.  Stacking pays where a step is launch-bound (a GPU: a K = 50
step is 3.6 ms for 225 MFLOP, issue 15); on a CPU a step is compute-bound, so stacking can only
save the per-step Python overhead.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np
import torch
from engine_workload import synthetic_panel

from portfed.agents import AgentConfig
from portfed.agents.batched import BatchedDPGTrainer
from portfed.federation import CohortPlan

CONFIG = AgentConfig(window=30, batch_size=50, learning_rate=5e-5)


def _engine(k: int, offset: int) -> BatchedDPGTrainer:
    seeds = list(range(offset, offset + k))
    return BatchedDPGTrainer(CONFIG, [synthetic_panel(s, False) for s in seeds], seeds)


def _plan(engine: BatchedDPGTrainer, steps: int) -> CohortPlan:
    return CohortPlan(round_index=0, parties=np.arange(engine.n_parties), steps=steps, start=None)


def _train_seconds(engine: BatchedDPGTrainer, steps: int, threads: int) -> float:
    """Seconds of ``steps`` local iterations of every party, after a 2-step warm-up."""
    torch.set_num_threads(threads)
    engine.train(_plan(engine, 2))
    start = time.perf_counter()
    engine.train(_plan(engine, steps))
    return time.perf_counter() - start


def _process(k: int, offset: int, steps: int, threads: int, barrier, out) -> None:
    torch.set_num_threads(threads)
    engine = _engine(k, offset)
    engine.train(_plan(engine, 2))  # warm-up before the common start
    barrier.wait()
    engine.train(_plan(engine, steps))
    out.put(True)


def two_processes(k: int, steps: int, threads: int) -> float:
    """Wall time from the common start until both concurrent processes of ``k`` parties are done."""
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_process, args=(k, i * k, steps, threads, barrier, out)) for i in range(2)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for _ in workers:
        out.get(timeout=3600)
    wall = time.perf_counter() - start
    for worker in workers:
        worker.join(timeout=60)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parties", type=int, default=50, help="parties per run (the paper: 50)")
    parser.add_argument("--steps", type=int, default=100, help="local iterations timed per party")
    parser.add_argument("--repeats", type=int, default=3, help="timings per way (best kept)")
    args = parser.parse_args()
    k, steps, threads = args.parties, args.steps, os.cpu_count() or 1
    single, stacked = _engine(k, 0), _engine(2 * k, 0)
    ways = {
        "one after another": min(2 * _train_seconds(single, steps, threads) for _ in range(args.repeats)),
        "stacked": min(_train_seconds(stacked, steps, threads) for _ in range(args.repeats)),
        "two processes": min(two_processes(k, steps, max(1, threads // 2)) for _ in range(args.repeats)),
    }
    work = 2 * k * steps
    print(f"two runs of K = {k} parties × {steps} local iterations, {threads} CPU threads (torch {torch.__version__})")
    for name, seconds in ways.items():
        print(f"  {name:<18} {seconds:7.2f} s  {work / seconds:8.0f} party-steps/s")
    best = min(ways, key=ways.get)
    print(f"fastest: {best} ({work / ways[best]:.0f} party-steps/s)")


if __name__ == "__main__":
    main()
