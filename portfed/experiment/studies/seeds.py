"""``portfed compare CONFIG --seeds 0,1,2``: the comparison repeated over seeds, with 95 % intervals.

**What a seed changes.**  ``config.seed`` is the root of every random stream of a comparison
(:mod:`portfed.experiment.party.build`): the parties' universes (``SeedSequence([seed, 2**31])``), each party's
stream ``SeedSequence([seed, k])`` — its initial model under ``initial_models: per_party`` (the
shared ``w^0`` is built from ``seed`` itself), its generator's fit (the GAN's initialisation and
training; GBM and VOM fits are deterministic in the data) and synthetic blocks, its batch starts, its
exploration noise (actor-critic) — and the party sampling of partial participation.  The market data,
the config's other settings and the test period do not change.  So a seed is one draw of the whole
experiment, and every algorithm of the comparison runs on that seed's parties.

**The table** (``table1_seeds.csv`` / ``.md``): per algorithm and baseline, each metric of Table 1
as the mean over seeds of the seed's party mean, with the Student t 95 % interval over seeds
(:mod:`portfed.evaluation.intervals`), and how many seeds each collapse criterion flagged.
**The differences** (``differences.csv`` / ``.md``): for every Fed+ algorithm of the comparison against
every other algorithm, the paired t interval of the per-seed difference of the party means; a difference
whose interval holds 0 is "no difference".  ``seed_metrics.csv`` holds the per-seed values behind both,
and each seed's comparison is a complete comparison directory ``seed_<s>/`` (resumable on its own).
With ``--resume`` a seed whose comparison finished is read back, not re-run (:func:`finished_comparison`):
adding a seed to a finished study trains that seed only, and a finished seed directory copied with only
the files :func:`~portfed.experiment.reports.load_comparison` reads (no training state) is enough.
``table1_seeds.png`` and ``differences.png`` draw the table and the differences, each seed as a dot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from portfed._io import atomic_save, atomic_write_text
from portfed.evaluation.intervals import LEVEL, paired_interval, t_interval, verdict
from portfed.experiment.config import FederatedConfig
from portfed.experiment.reports import figure_over_seeds, load_comparison, save_figure
from portfed.experiment.reports.disclosure import is_averaged
from portfed.experiment.runs import RunDirError, claim, config_fingerprint, read_record
from portfed.experiment.studies.compare import Comparison, compare
from portfed.sweep import Executor

logger = logging.getLogger(__name__)

#: Per-seed metrics (party means), in table order: key → (label, percent?).
SEED_METRICS: dict[str, tuple[str, bool]] = {
    "annualized_return": ("Annualized return (%)", True),
    "sharpe": ("Sharpe (annualized)", False),
    "fapv": ("fAPV", False),
    "max_drawdown": ("MDD (%)", True),
}
#: The metrics whose Fed+-minus-other differences get intervals.
DIFFERENCE_METRICS: tuple[str, ...] = ("annualized_return", "sharpe", "fapv")
#: The Fed+ family (paper 000 §5.2): the rows whose differences the paper's claims are about.
FED_PLUS: tuple[str, ...] = ("fedavg+", "fedgeomed+", "fedcomed+", "hybrid+")
INTERVAL_METHOD = (f"Student t {int(LEVEL * 100)} % interval over seeds of the seed's mean over parties "
                   "(differences: paired over seeds)")


def seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed_{seed}"


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` as distinct integers ``0 <= s < 2**63``.

    Raises:
        ValueError: empty, not integers, negative, too large or repeated.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise ValueError(f"--seeds {text!r} holds no seed")
    bad = [s for s in seeds if not 0 <= s < 2**63]
    if bad:
        raise ValueError(f"--seeds {text!r}: seed {bad[0]} is not in [0, 2**63)")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r} repeats a seed")
    return seeds


@dataclass
class SeedComparison:
    """What :func:`compare_seeds` produced: the per-seed values, the table and the differences."""

    seeds: list[int]
    per_seed: pd.DataFrame
    table: pd.DataFrame
    differences: pd.DataFrame
    comparisons: dict[int, Comparison]


def seed_rows(seed: int, comparison: Comparison) -> list[dict[str, object]]:
    """One row per strategy of ``comparison``: the seed's party means (parties that could trade) and
    both collapse criteria's verdicts (``collapsed``: the first criterion; ``noise_collapsed``: the
    noise-aware one, the verdict)."""
    rows = []
    metrics = comparison.party_metrics
    for strategy in dict.fromkeys(metrics["strategy"]):
        at = metrics[metrics["strategy"] == strategy]
        row: dict[str, object] = {"seed": seed, "strategy": strategy, "hindsight": bool(at["hindsight"].iloc[0])}
        row.update({key: float(at[key].mean()) for key in SEED_METRICS})
        first = comparison.collapse.get(strategy)
        noise = (comparison.noise_collapse or {}).get(strategy)
        row["collapsed"] = None if first is None else bool(first.collapsed)
        row["noise_collapsed"] = None if noise is None else bool(noise.collapsed)
        rows.append(row)
    return rows


def seed_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per strategy (first-seen order): each metric's mean, low and high over seeds, and the collapse counts."""
    rows = {}
    for strategy in dict.fromkeys(per_seed["strategy"]):
        at = per_seed[per_seed["strategy"] == strategy]
        row: dict[str, object] = {"seeds": len(at)}
        for key in SEED_METRICS:
            interval = t_interval(at[key].to_numpy())
            row.update({key: interval.mean, f"{key}_low": interval.low, f"{key}_high": interval.high})
        for column in ("collapsed", "noise_collapsed"):
            flags = at[column].dropna()
            row[f"{column}_seeds"] = int(flags.sum()) if len(flags) else None
        name = f"{strategy} (hindsight)" if bool(at["hindsight"].iloc[0]) else strategy
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "strategy"
    return table


def difference_table(per_seed: pd.DataFrame, algorithms: Sequence[str]) -> pd.DataFrame:
    """Every Fed+ algorithm of ``algorithms`` minus every other one: per metric the paired interval and
    its verdict (module docstring); empty when the comparison has no Fed+ algorithm or nothing to compare."""
    rows = []
    wide = {key: per_seed.pivot(index="seed", columns="strategy", values=key) for key in DIFFERENCE_METRICS}
    for plus in (a for a in algorithms if a in FED_PLUS):
        for other in (a for a in algorithms if a != plus):
            row: dict[str, object] = {"fed_plus": plus, "other": other}
            for key in DIFFERENCE_METRICS:
                diff = paired_interval(wide[key][plus].to_numpy(), wide[key][other].to_numpy())
                row.update({key: diff.mean, f"{key}_low": diff.low, f"{key}_high": diff.high,
                            f"{key}_verdict": verdict(diff, "Fed+ higher", "Fed+ lower")})
            rows.append(row)
    return pd.DataFrame(rows)


def _cell(mean: float, low: float, high: float, percent: bool) -> str:
    scale, digits = (100.0, 2) if percent else (1.0, 3)
    if pd.isna(low):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def seed_table_markdown(table: pd.DataFrame, seeds: Sequence[int]) -> str:
    """The table as Markdown: ``mean [low, high]`` per metric, percent where the header says so."""
    header = ["Strategy", *(label for label, _ in SEED_METRICS.values()), "collapsed: first / noise-aware (seeds)"]
    lines = [f"Mean over seeds {list(seeds)} of each seed's mean over parties; [95 % interval] "
             f"({INTERVAL_METHOD}).", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in table.iterrows():
        cells = [_cell(row[key], row[f"{key}_low"], row[f"{key}_high"], pct) for key, (_, pct) in SEED_METRICS.items()]
        first, noise = row["collapsed_seeds"], row["noise_collapsed_seeds"]
        flags = "—" if pd.isna(first) else f"{int(first)} / {int(noise)} of {int(row['seeds'])}"
        lines.append("| " + " | ".join([str(name), *cells, flags]) + " |")
    return "\n".join(lines) + "\n"


def differences_markdown(differences: pd.DataFrame) -> str:
    """Fed+ minus each other algorithm: ``mean [low, high]`` and the verdict per metric."""
    if differences.empty:
        return "No Fed+ algorithm in the comparison: no paired differences.\n"
    header = ["Fed+", "minus"]
    for key in DIFFERENCE_METRICS:
        label, _ = SEED_METRICS[key]
        header += [label, "verdict"]
    lines = ["Paired over seeds: Fed+ minus the other algorithm on the same seed's parties; [95 % interval].", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in differences.iterrows():
        cells = [str(row["fed_plus"]), str(row["other"])]
        for key in DIFFERENCE_METRICS:
            cells += [_cell(row[key], row[f"{key}_low"], row[f"{key}_high"], SEED_METRICS[key][1]),
                      str(row[f"{key}_verdict"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def seed_table_figure(table: pd.DataFrame, per_seed: pd.DataFrame) -> Figure:
    """Table 1 over seeds drawn, hindsight baselines left out (their scale would hide the rest): per metric,
    each strategy's seeds and its mean with the 95 % interval."""
    shown = per_seed[~per_seed["hindsight"].astype(bool)]
    seeds = {name: at for name, at in shown.groupby("strategy", sort=False)}
    return figure_over_seeds(table.loc[[n for n in table.index if n in seeds]],
                             SEED_METRICS,
                             "Table 1 over seeds: the seeds (grey), their mean and its 95 % t interval "
                             "(hindsight baselines left out)", seeds)


def differences_figure(differences: pd.DataFrame, per_seed: pd.DataFrame) -> Figure:
    """The paired differences drawn: per metric, each Fed+ − other pair's per-seed differences and its
    mean with the paired 95 % interval, beside a line at 0 (an interval across it: no difference)."""
    wide = {key: per_seed.pivot(index="seed", columns="strategy", values=key) for key in DIFFERENCE_METRICS}
    names = [f"{plus} − {other}" for plus, other in zip(differences["fed_plus"], differences["other"], strict=True)]
    seeds = {name: pd.DataFrame({key: wide[key][plus] - wide[key][other] for key in DIFFERENCE_METRICS})
             for name, plus, other in zip(names, differences["fed_plus"], differences["other"], strict=True)}
    return figure_over_seeds(differences.set_axis(names), {key: SEED_METRICS[key] for key in DIFFERENCE_METRICS},
                             "Fed+ minus each other method, paired over seeds: the seeds (grey), the mean and its "
                             "95 % interval", seeds, zero=True)


def write_seed_comparison(out: Path, result: SeedComparison) -> None:
    atomic_save(out / "seed_metrics.csv", lambda p: result.per_seed.to_csv(p, index=False))
    atomic_save(out / "table1_seeds.csv", lambda p: result.table.to_csv(p))
    atomic_write_text(out / "table1_seeds.md", seed_table_markdown(result.table, result.seeds))
    atomic_save(out / "differences.csv", lambda p: result.differences.to_csv(p, index=False))
    atomic_write_text(out / "differences.md", differences_markdown(result.differences))
    save_figure(seed_table_figure(result.table, result.per_seed), out / "table1_seeds.png")
    if not result.differences.empty:
        save_figure(differences_figure(result.differences, result.per_seed), out / "differences.png")
    meta = {"seeds": result.seeds, "interval": INTERVAL_METHOD, "level": LEVEL,
            "directories": [seed_dir(Path("."), s).as_posix() for s in result.seeds]}
    atomic_write_text(out / "seeds.json", json.dumps(meta, indent=2) + "\n")


def finished_comparison(config: FederatedConfig, directory: Path, names: Sequence[str]) -> Comparison | None:
    """``directory``'s comparison as written (:func:`~portfed.experiment.reports.load_comparison`) when it is the
    finished run of ``config`` — its ``run.json`` ``finished`` with ``config``'s fingerprint and the algorithms
    ``names``, each sub-run ``finished`` after ``config.federation.rounds`` rounds (the fingerprint leaves the
    rounds out: a run may be resumed for more) — and ``None`` otherwise (it is then trained or resumed).  Not
    for ``evaluation.disclosure: averaged``, whose directory holds no per-party rows to read back."""
    if is_averaged(config):
        return None
    try:
        record = read_record(directory)
        subs = [read_record(directory / name) for name in names]
    except RunDirError:
        return None
    if (record is None or record.get("kind") != "comparison" or record.get("status") != "finished"
            or record.get("fingerprint") != config_fingerprint(config) or record.get("algorithms") != list(names)):
        return None
    if any(sub is None or sub.get("status") != "finished" or sub.get("rounds") != config.federation.rounds
           for sub in subs):
        return None
    logger.info("%s: finished with this config; read back, not re-run", directory)
    return load_comparison(directory)


def compare_seeds(config: FederatedConfig, out_dir: str | Path, seeds: Sequence[int],
                  algorithms: Sequence[str] | None = None, *, resume: bool = False, progress: bool = True,
                  n_jobs: int | Executor | None = 1, force: bool = False) -> SeedComparison:
    """:func:`~portfed.experiment.studies.compare.compare` for each seed into ``out_dir/seed_<s>``, then the
    table and differences over seeds (module docstring) into ``out_dir``; ``resume`` and ``force`` as there,
    for every seed's directory.  ``out_dir`` itself is locked and recorded (``kind: seeds``; more seeds or
    algorithms may be added to it later, another config is refused unless ``force``).

    Raises:
        ValueError: no seed or a repeated one, and what :func:`~portfed.experiment.studies.compare.compare` raises.
    """
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, at least one, got {seeds}")
    out = Path(out_dir)
    names = list(config.federation.algorithms if algorithms is None else algorithms)
    with claim(out, "seeds", config_fingerprint(config), force=force, seeds=seeds, algorithms=names):
        return _compare_seeds(config, out, seeds, algorithms, names, resume, progress, n_jobs, force)


def _compare_seeds(config: FederatedConfig, out: Path, seeds: list[int], algorithms: Sequence[str] | None,
                   names: list[str], resume: bool, progress: bool, n_jobs: int | Executor | None,
                   force: bool) -> SeedComparison:
    comparisons = {}
    for seed in seeds:
        seeded = config.model_copy(update={"seed": seed})
        done = finished_comparison(seeded, seed_dir(out, seed), names) if resume else None
        comparisons[seed] = done if done is not None else compare(
            seeded, seed_dir(out, seed), algorithms, resume=resume, progress=progress, n_jobs=n_jobs, force=force)
    per_seed = pd.DataFrame([row for s in seeds for row in seed_rows(s, comparisons[s])])
    result = SeedComparison(seeds=seeds, per_seed=per_seed, table=seed_table(per_seed),
                            differences=difference_table(per_seed, names), comparisons=comparisons)
    write_seed_comparison(out, result)
    return result
