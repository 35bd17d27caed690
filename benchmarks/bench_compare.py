"""A two-algorithm comparison with ``--jobs 1`` and ``--jobs 2``, cold and warm fit cache (issue 15).

Usage: ``.venv/bin/python benchmarks/bench_compare.py [--rounds 4] [--parties 6] [--gan-steps 500]
[--quick] [--out DIR]``.

The config is ``configs/default.yaml`` (NYSE(N), parties of 9 stocks, generators GBM, VOM, GAN and
none cycled over the parties, fits in 2 processes, a held-out year) shrunk to run in a few minutes
on 2 busy cores: ``--parties`` parties (6: 2 GBM, 2 VOM and 1 GAN fit), the GAN at ``--gan-steps``
steps (1,500 in default.yaml), the algorithms ``fedavg`` and ``fedavg+``, ``--rounds`` rounds of 25
steps (40 in default.yaml), no interpolation diagnostics, and one torch thread per process (so that
``--jobs 2`` uses the 2 cores without oversubscribing them).  For each number of jobs the comparison runs twice into one fresh directory: first with a cold fit
cache (every generator fitted, then stored in ``<out>/fit_cache``), then again with the cache warm
(every generator loaded, none fitted).  Printed per run: the wall time of ``compare``, the time spent
obtaining the generators (fitting or loading them; :class:`portfed.experiment.build.FitReport`) and
its share of the wall time, the fits and loads; then the time the warm cache saves, and whether every
run's Table 1 is identical.  ``--quick`` runs ``configs/tiny.yaml`` instead (a smoke test, seconds).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from portfed.experiment.compare import compare
from portfed.experiment.config import parse_config

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="federated rounds (default.yaml has 40)")
    parser.add_argument("--parties", type=int, default=6, help="parties (default.yaml has 10)")
    parser.add_argument("--gan-steps", type=int, default=500, help="GAN training steps (default.yaml has 1,500)")
    parser.add_argument("--quick", action="store_true", help="configs/tiny.yaml: a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="keep the comparison directories here")
    args = parser.parse_args()
    raw = bench_config(args.rounds, args.parties, args.gan_steps, args.quick)
    config = parse_config(raw)
    parties = raw["parties"]
    print(f"{'tiny' if args.quick else 'default'}.yaml: {', '.join(ALGORITHMS)} × {args.rounds} rounds of "
          f"{raw['federation']['local_steps']} steps, {parties['count']} parties × {parties['n_assets']} assets, "
          f"generators {parties['generators']}, fit_workers {config.fit_workers}, torch threads {config.threads()}")
    with tempfile.TemporaryDirectory() as scratch:
        root = args.out or Path(scratch)
        rows, tables = [], []
        for jobs in (1, 2):
            out = root / f"jobs{jobs}"
            for cache in ("cold", "warm"):
                start = time.perf_counter()
                result = compare(config, out, progress=False, n_jobs=jobs)
                wall = time.perf_counter() - start
                fits = result.fits
                rows.append({"jobs": jobs, "cache": cache, "wall [s]": wall, "generators [s]": fits.seconds,
                             "share": fits.seconds / wall, "fitted": fits.fitted, "loaded": fits.loaded})
                tables.append(result.table)
                print(f"  jobs {jobs}, {cache} cache: {wall:6.1f} s", flush=True)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, formatters={"wall [s]": "{:.1f}".format, "generators [s]": "{:.2f}".format,
                                                   "share": "{:.1%}".format}))
    for jobs in (1, 2):
        cold, warm = (frame[(frame["jobs"] == jobs) & (frame["cache"] == c)].iloc[0] for c in ("cold", "warm"))
        print(f"jobs {jobs}: generators {cold['generators [s]']:.1f} s cold ({cold['share']:.1%} of the compare) vs "
              f"{warm['generators [s]']:.2f} s warm ({warm['share']:.1%}); the warm rerun takes "
              f"{warm['wall [s]'] / cold['wall [s]']:.0%} of the cold one")
    identical = all(table.equals(tables[0]) for table in tables[1:])
    print(f"Table 1 identical across the {len(tables)} runs: {'yes' if identical else 'NO'}")
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
