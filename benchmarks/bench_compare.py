"""A two-algorithm comparison with ``--jobs 1`` and ``--jobs 2``: wall time and the share spent fitting (issue 15).

Usage: ``.venv/bin/python benchmarks/bench_compare.py [--small [--rounds 4] [--parties 6] [--gan-steps 500]]
[--quick] [--out DIR]``.

Default (``make bench``): the paper's scale — ``configs/paper_sp500.yaml`` with the CNN EIIE (50 parties × 9 assets, 16
GBM, 17 VOM and 17 GAN fits in 2 processes, 800 rounds × 50 local iterations, the held-out year
2019) with the algorithms ``fedavg`` and ``fedavg+`` and no Fig. 1c diagnostics.  It runs twice, each
into a fresh directory (cold fit cache): ``--jobs 1`` with the config's threads (2 for the batched
engine on 2 CPUs) and ``--jobs 2`` with one torch thread per process (the cores split between the two
algorithms).  44 minutes on the idle 2-core machine (2026-11-23: 1,417.6 s and 1,220.0 s; the figures
are in the README's "Fit once").

``--small``: ``configs/default.yaml`` (NYSE(N), parties of 9 stocks, generators GBM, VOM, GAN and none
cycled over the parties, fits in 2 processes) shrunk to a few minutes: ``--parties`` parties (6: 2
GBM, 2 VOM and 1 GAN fit), the GAN at ``--gan-steps`` steps, ``--rounds`` rounds of 25 steps, one torch
thread per process; for each number of jobs the comparison runs twice into one directory, first with
a cold fit cache, then warm (every generator loaded, none fitted).  ``--quick``: ``configs/tiny.yaml``
instead (a smoke test, seconds).

Printed per run: the wall time of ``compare``, the time spent obtaining the generators (fitting or
loading them; :class:`portfed.experiment.party.build.FitReport`) and its share of the wall time, the fits and
loads; then whether the runs' Tables 1 are identical (the small bench's runs all use one thread, so
they must be; the paper bench's ``--jobs 1`` and ``--jobs 2`` runs use 2 and 1 threads, whose float32
sums may differ in the last bits).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from portfed.experiment.config import parse_config
from portfed.experiment.studies import compare

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ALGORITHMS = ["fedavg", "fedavg+"]


def bench_config(rounds: int, parties: int, gan_steps: int, quick: bool) -> dict:
    raw = copy.deepcopy(yaml.safe_load((CONFIGS / ("tiny.yaml" if quick else "default.yaml")).read_text()))
    raw["federation"].update({"algorithms": ALGORITHMS, "rounds": rounds, "checkpoint_every": rounds})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["torch_threads"] = 1
    if not quick:
        raw["parties"]["count"] = parties
        raw["parties"]["generator_params"]["gan"]["steps"] = gan_steps
    return raw


def paper_config(threads: int | None) -> dict:
    raw = copy.deepcopy(yaml.safe_load((CONFIGS / "paper_sp500.yaml").read_text()))
    raw["federation"]["algorithms"] = ALGORITHMS
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["torch_threads"] = threads
    # The CNN EIIE, as when the figures above were measured (the config now holds the paper's recurrent one).
    raw["agent"]["network"] = "cnn"
    return raw


def timed_compare(raw: dict, out: Path, jobs: int, label: str) -> tuple[dict[str, object], pd.DataFrame]:
    config = parse_config(raw)
    start = time.perf_counter()
    result = compare(config, out, progress=False, n_jobs=jobs)
    wall = time.perf_counter() - start
    fits = result.fits
    print(f"  {label}: {wall:7.1f} s", flush=True)
    return ({"run": label, "jobs": jobs, "threads": config.threads(), "wall [s]": wall,
             "generators [s]": fits.seconds, "share": fits.seconds / wall, "fitted": fits.fitted,
             "loaded": fits.loaded}, result.table)


def describe(raw: dict, name: str) -> None:
    parties, fed = raw["parties"], raw["federation"]
    print(f"{name}: {', '.join(ALGORITHMS)} × {fed['rounds']} rounds of {fed['local_steps']} steps, "
          f"{parties['count']} parties × {parties['n_assets']} assets, generators {parties['generators']}, "
          f"fit_workers {raw.get('fit_workers', 1)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="configs/default.yaml shrunk, cold and warm cache")
    parser.add_argument("--rounds", type=int, default=4, help="--small: federated rounds (default.yaml has 40)")
    parser.add_argument("--parties", type=int, default=6, help="--small: parties (default.yaml has 10)")
    parser.add_argument("--gan-steps", type=int, default=500, help="--small: GAN steps (default.yaml has 1,500)")
    parser.add_argument("--quick", action="store_true", help="--small on configs/tiny.yaml: a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="keep the comparison directories here")
    args = parser.parse_args()
    rows, tables = [], []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.out or Path(scratch)
        if args.small or args.quick:
            raw = bench_config(args.rounds, args.parties, args.gan_steps, args.quick)
            describe(raw, "tiny.yaml" if args.quick else "default.yaml (shrunk)")
            for jobs in (1, 2):
                for cache in ("cold", "warm"):
                    row, table = timed_compare(raw, root / f"jobs{jobs}", jobs, f"jobs {jobs}, {cache} cache")
                    rows.append(row)
                    tables.append(table)
        else:
            describe(paper_config(None), "paper_sp500.yaml")
            for jobs, threads in ((1, None), (2, 1)):
                row, table = timed_compare(paper_config(threads), root / f"jobs{jobs}", jobs, f"jobs {jobs}, cold cache")
                rows.append(row)
                tables.append(table)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, formatters={"wall [s]": "{:.1f}".format, "generators [s]": "{:.2f}".format,
                                                   "share": "{:.1%}".format}))
    one, two = frame[frame["jobs"] == 1].iloc[0], frame[frame["jobs"] == 2].iloc[0]
    print(f"--jobs 2 takes {two['wall [s]'] / one['wall [s]']:.0%} of --jobs 1; fitting is {one['share']:.0%} of "
          f"--jobs 1 and {two['share']:.0%} of --jobs 2")
    identical = all(table.equals(tables[0]) for table in tables[1:])
    print(f"Table 1 identical across the {len(tables)} runs: {'yes' if identical else 'no'}")
    if not identical and (args.small or args.quick):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
