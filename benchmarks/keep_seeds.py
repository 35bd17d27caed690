"""Copy the finished seeds of a ``portfed compare --seeds`` directory, with only the files read back, for the record.

A paper-scale seed trains for hours and its directory holds ~150 MB of training state (checkpoints, snapshots,
fitted generators) and per-round records; what the tables over seeds and ``benchmarks/paper_verdicts.py`` read is a
few megabytes.  This copies, for every ``seed_<s>/`` whose comparison finished, the files
:func:`portfed.experiment.reports.load_comparison` and the verdicts read (``docs/outputs.md``, "A federated
comparison"), and the top directory's records and tables over seeds, into ``DEST`` (``docs/reports/data/…`` for
the report).  ``portfed compare CONFIG --seeds … --out OUT --resume`` into a copy of ``DEST`` reads those seeds
back instead of re-running them (:func:`portfed.experiment.studies.seeds.finished_comparison`) and trains the
others, so a long study can be finished on another machine.

Usage: ``python benchmarks/keep_seeds.py SRC DEST`` — prints the seeds copied and their size.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

#: The top directory's files (the records of ``compare --seeds`` and, once written, its tables and verdicts).
TOP = ("run.json", "seeds.json", "seed_metrics.csv", "table1_seeds.csv", "table1_seeds.md", "table1_seeds.png",
       "differences.csv", "differences.md", "differences.png", "verdicts.md")
#: A seed's comparison files that are read back (and its Table 1 as written, for the reader).
SEED = ("config.yaml", "run.json", "parties.csv", "party_metrics.csv", "baseline_values.csv", "collapse.csv",
        "table1.csv", "table1.md")
#: Each sub-run's files that are read back.
SUB_RUN = ("run.json", "learning_curve.csv", "interpolation.csv", "portfolio_values.csv", "party_metrics.csv",
           "quarantine.csv")


def finished_seeds(source: Path) -> list[Path]:
    """The ``seed_<s>/`` directories of ``source`` whose comparison's ``run.json`` says ``finished``."""
    seeds = []
    for directory in sorted(source.glob("seed_*")):
        record = directory / "run.json"
        if record.is_file() and json.loads(record.read_text()).get("status") == "finished":
            seeds.append(directory)
    return seeds


def copy_files(source: Path, dest: Path, names: tuple[str, ...]) -> int:
    """Copy the files ``names`` that ``source`` holds into ``dest``; returns their bytes."""
    dest.mkdir(parents=True, exist_ok=True)
    size = 0
    for name in names:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
            size += (dest / name).stat().st_size
    return size


def keep(source: Path, dest: Path) -> dict[str, int]:
    """Copy ``source``'s finished seeds (module docstring) into ``dest``; returns bytes per seed copied."""
    if not (source / "run.json").is_file():
        raise SystemExit(f"{source} holds no run.json: not a `portfed compare --seeds` directory")
    copy_files(source, dest, TOP)
    copied = {}
    for seed in finished_seeds(source):
        size = copy_files(seed, dest / seed.name, SEED)
        for algorithm in json.loads((seed / "run.json").read_text())["algorithms"]:
            size += copy_files(seed / algorithm, dest / seed.name / algorithm, SUB_RUN)
        copied[seed.name] = size
    return copied


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python benchmarks/keep_seeds.py SRC DEST")
    for name, size in keep(Path(argv[0]), Path(argv[1])).items():
        print(f"{name}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
