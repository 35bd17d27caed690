"""Where a whole federated round of ``configs/paper_bundled.yaml`` spends its time (not run by ``make bench``).

Usage: ``.venv/bin/python benchmarks/profile_paper_round.py [--rounds 40] [--gan-steps 50] [--algorithm fedavg+]
[--threads N] [--config configs/paper_sp500.yaml]``.

Builds the paper-scale federation of ``--config`` (default ``configs/paper_bundled.yaml``: 50 parties × 9
NYSE(N) stocks, private GBM / VOM / GAN augmenters;
``--gan-steps`` shortens only the GAN fits, which the rounds do not depend on for their cost — sampling a
synthetic year costs the same), then runs ``--rounds`` rounds of ``--algorithm`` through the experiment
runner (:func:`portfed.experiment.runs.federated.run_algorithm`, checkpoints and records included; the
diagnostics and backtests after the last round are skipped: ``interpolation_rounds`` is emptied) under
cProfile, and prints the time per round split into network arithmetic, batching, augmentation
regeneration, aggregation, records and checkpointing.  With ``regenerate_every = 1000`` and
``E = 50`` every party regenerates its synthetic year once per 20 rounds: 40 rounds show two
regenerations, as the whole run does on average.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

import torch

from portfed.experiment.config import load_config
from portfed.experiment.party import build_federation
from portfed.experiment.runs import run_algorithm

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "paper_bundled.yaml"

#: label → (function name, part of its file path), summed as cumulative time.
PARTS = {
    "network arithmetic (forward, backward, Adam, PVM)": ("run", "agents/batched_step.py"),
    "batch sampling (K generators)": ("sample_starts", "agents/sampler.py"),
    "step statistics (per-party sums)": ("sums", "agents/records.py"),
    "augmentation: synthetic years (Augmenter.panel)": ("panel", "generators/augment.py"),
    "augmentation: panel swaps (set_panel)": ("set_panel", "agents/batched.py"),
    "Local-Solve plan (θ, z, start)": ("plan_local_solve", "local_solve.py"),
    "server step (aggregation) and round records": ("finish_round", "rounds.py"),
    "checkpoints (party states, torch.save)": ("save_checkpoint", "experiment/checkpoint.py"),
    "per-round rows for rounds.csv": ("rows", "federation/rounds.py"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--gan-steps", type=int, default=50)
    parser.add_argument("--algorithm", default="fedavg+")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the experiment config (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: the config's, FederatedConfig.threads)")
    args = parser.parse_args()
    config = load_config(args.config)
    torch.set_num_threads(config.threads() if args.threads is None else args.threads)
    parties = config.parties.model_copy(update={"generator_params": {"gan": {"steps": args.gan_steps}}})
    config = config.model_copy(update={
        "parties": parties,
        "federation": config.federation.model_copy(update={"rounds": args.rounds}),
        "diagnostics": config.diagnostics.model_copy(update={"interpolation_rounds": []}),
    })
    start = time.perf_counter()
    federation = build_federation(config, progress=False)
    print(f"torch threads = {torch.get_num_threads()}; built {len(federation.parties)} parties in {time.perf_counter() - start:.1f} s "
          f"(GAN fits shortened to {args.gan_steps} steps)")

    import portfed.experiment.runs.federated as runner

    # Time the rounds only: stub the evaluation that follows them.
    runner.interpolation_curves = lambda *a, **k: runner.pd.DataFrame()
    runner.backtest_agents = lambda *a, **k: (runner.pd.DataFrame(),) * 3
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        profiler.enable()
        run_algorithm(config, args.algorithm, federation, Path(out), progress=False)
        profiler.disable()
        total = time.perf_counter() - start
    table = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cumulative(name: str, file_part: str) -> float:
        return sum(v[3] for key, v in table.items() if key[2] == name and file_part in key[0])

    steps = args.rounds * len(federation.parties) * config.federation.local_steps
    print(f"{args.rounds} rounds of {args.algorithm}: {total:.2f} s under cProfile, {total / args.rounds * 1e3:.0f} ms "
          f"per round, {steps / total:.0f} party-steps/s")
    accounted = 0.0
    for label, (name, file_part) in PARTS.items():
        seconds = cumulative(name, file_part)
        accounted += seconds
        print(f"  {label:<52} {seconds:7.2f} s  {100 * seconds / total:5.1f} %")
    print(f"  {'other':<52} {total - accounted:7.2f} s  {100 * (total - accounted) / total:5.1f} %")
    print("  top functions by own time:")
    for (file, line, name), v in sorted(table.items(), key=lambda item: -item[1][2])[:12]:
        where = name if file == "~" else f"{name} ({file.rsplit('/', 1)[-1]}:{line})"
        print(f"    {v[2]:7.2f} s  {where}")


if __name__ == "__main__":
    main()
