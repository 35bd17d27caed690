"""A collapse study's arms over seeds: each outcome with a 95 % interval, and each arm against its controls.

An **arm** is one algorithm in one cell of :func:`~portfed.experiment.studies.collapse_study.run_collapse_study`'s
grid; its seeds are replicates, and every arm of a seed runs on that seed's parties (the same universes,
initial models and generator fits: :mod:`portfed.experiment.studies.seeds`), so arms are compared **paired
over seeds**, as :mod:`portfed.evaluation.intervals` does for a comparison's methods.

* ``collapse_seeds.csv`` / ``.md`` / ``.png``: per arm, the seeds each criterion flagged and, for each of
  :data:`OUTCOMES` (the parties in cash on the test year, the annualized return, the Sharpe ratio, the mean
  cash weight: ``collapse_study.csv``'s columns, each a mean over the run's parties), the mean over seeds
  and its Student t 95 % interval.
* ``collapse_differences.csv`` / ``.md``: paired over seeds, every arm minus each of its controls —
  the base cell's ``local`` (does federating change the outcome?) and, for an arm of a factor cell, the
  same algorithm in the base cell (does the factor change it?) — with the verdict of
  :func:`~portfed.evaluation.intervals.verdict`: a difference whose interval holds 0 is "no difference".

A seed whose value is not finite (every party's backtest failed: no return) is left out of that outcome's
interval, and of the pairs it belongs to; ``n`` says how many seeds each interval rests on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from portfed.evaluation.intervals import Interval, paired_interval, t_interval, verdict
from portfed.experiment.config import BASE
from portfed.experiment.reports import figure_over_seeds

#: ``collapse_study.csv`` column → (label, shown in percent?).
OUTCOMES: dict[str, tuple[str, bool]] = {
    "all_cash_parties": ("parties in cash on the test period", False),
    "annualized_return": ("annualized return (%)", True),
    "sharpe": ("Sharpe (annualized)", False),
    "mean_cash": ("mean cash weight (%)", True),
}
SEEDS_FILE, DIFFERENCES_FILE = "collapse_seeds", "collapse_differences"
CONTROL = "local"


def _interval(values: np.ndarray) -> Interval | None:
    finite = values[np.isfinite(values)]
    return t_interval(finite) if finite.size else None


def _columns(key: str, interval: Interval | None) -> dict[str, float]:
    if interval is None:
        return {key: np.nan, f"{key}_low": np.nan, f"{key}_high": np.nan, f"{key}_n": 0}
    return {key: interval.mean, f"{key}_low": interval.low, f"{key}_high": interval.high, f"{key}_n": interval.n}


def _arms(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(cell, algorithm) in the rows' order (grid order, then the study's algorithm order)."""
    return list(dict.fromkeys(zip(rows["cell"], rows["algorithm"], strict=True)))


def seed_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per arm: ``seeds``, ``collapsed_seeds`` / ``noise_collapsed_seeds`` (the seeds each criterion flagged;
    NaN without the criterion's column) and, per outcome, ``<outcome>``, ``_low``, ``_high``, ``_n``."""
    out = []
    for cell, algorithm in _arms(rows):
        at = rows[(rows["cell"] == cell) & (rows["algorithm"] == algorithm)]
        row: dict[str, object] = {"cell": cell, "algorithm": algorithm, "seeds": len(at)}
        for column in ("collapsed", "noise_collapsed"):
            row[f"{column}_seeds"] = int(at[column].eq(True).sum()) if column in at else np.nan  # NaN: not flagged
        for key in OUTCOMES:
            row.update(_columns(key, _interval(at[key].to_numpy(dtype=np.float64))))
        out.append(row)
    return pd.DataFrame(out)


def _by_seed(rows: pd.DataFrame, cell: str, algorithm: str, key: str) -> pd.Series:
    at = rows[(rows["cell"] == cell) & (rows["algorithm"] == algorithm)]
    return pd.Series(at[key].to_numpy(dtype=np.float64), index=at["seed"].to_numpy())


def arm_differences(rows: pd.DataFrame) -> pd.DataFrame:
    """Every arm minus each of its controls (module docstring), paired over the seeds both ran: per outcome
    ``<outcome>``, ``_low``, ``_high``, ``_n`` and ``_verdict``.  Empty when no arm has a control."""
    arms = _arms(rows)
    out = []
    for cell, algorithm in arms:
        controls = [(BASE, CONTROL)] if algorithm != CONTROL else []
        if cell != BASE:
            controls.append((BASE, algorithm))
        for control in (c for c in controls if c in arms):
            row: dict[str, object] = {"cell": cell, "algorithm": algorithm, "minus_cell": control[0],
                                      "minus_algorithm": control[1], "seeds": len(_by_seed(rows, cell, algorithm, "seed"))}
            for key in OUTCOMES:
                a, b = _by_seed(rows, cell, algorithm, key), _by_seed(rows, *control, key)
                seeds = [s for s in a.index if s in b.index and np.isfinite(a[s]) and np.isfinite(b[s])]
                diff = paired_interval(a[seeds].to_numpy(), b[seeds].to_numpy()) if seeds else None
                row.update(_columns(key, diff))
                row[f"{key}_verdict"] = "no seed" if diff is None else verdict(diff)
            out.append(row)
    return pd.DataFrame(out)


def arm_name(cell: str, algorithm: str) -> str:
    """``algorithm`` in the base cell, ``algorithm (cell)`` in a factor cell, each setting by the last part of
    its key (``fedprox (sigma=0.001)`` for the cell ``federation.algorithm_params.fedprox.sigma=0.001``)."""
    if cell == BASE:
        return algorithm
    settings = [f"{key.rsplit('.', 1)[-1]}={value}" for key, _, value in (s.partition("=") for s in cell.split(","))]
    return f"{algorithm} ({', '.join(settings)})"


def seed_summary_figure(summary: pd.DataFrame, rows: pd.DataFrame) -> Figure:
    """:func:`seed_summary` drawn: per outcome, each arm's seeds and its mean with the 95 % interval."""
    names = [arm_name(c, a) for c, a in zip(summary["cell"], summary["algorithm"], strict=True)]
    seeds = {arm_name(c, a): at for (c, a), at in rows.groupby(["cell", "algorithm"], sort=False)}
    return figure_over_seeds(summary.set_axis(names), OUTCOMES,
                             "Each arm over seeds: the seeds (grey), their mean and its 95 % t interval", seeds)


def _cell(row: pd.Series, key: str) -> str:
    percent = OUTCOMES[key][1]
    scale, digits = (100.0, 2) if percent else (1.0, 2)
    if pd.isna(row[key]):
        return "—"
    text = f"{row[key] * scale:.{digits}f}"
    if not pd.isna(row[f"{key}_low"]):
        text += f" [{row[f'{key}_low'] * scale:.{digits}f}, {row[f'{key}_high'] * scale:.{digits}f}]"
    used = int(row[f"{key}_n"])
    return text if used == int(row["seeds"]) else f"{text} (n = {used})"


def seed_summary_markdown(summary: pd.DataFrame) -> str:
    """:func:`seed_summary` as Markdown: ``mean [low, high]`` per outcome over seeds."""
    header = ["cell", "algorithm", "seeds", "collapsed: first / noise-aware",
              *(label for label, _ in OUTCOMES.values())]
    lines = ["Per arm, the mean over seeds of each run's mean over parties; [Student t 95 % interval over seeds].",
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in summary.iterrows():
        flags = " / ".join("—" if pd.isna(row[c]) else str(int(row[c]))
                           for c in ("collapsed_seeds", "noise_collapsed_seeds"))
        lines.append("| " + " | ".join([str(row["cell"]), str(row["algorithm"]), str(int(row["seeds"])), flags,
                                        *(_cell(row, k) for k in OUTCOMES)]) + " |")
    return "\n".join(lines) + "\n"


def arm_differences_markdown(differences: pd.DataFrame) -> str:
    """:func:`arm_differences` as Markdown: ``mean [low, high]`` and the verdict per outcome."""
    if differences.empty:
        return "No arm has a control in this study (neither the base cell's local training nor a factor cell).\n"
    header = ["cell", "algorithm", "minus"]
    for label, _ in OUTCOMES.values():
        header += [label, "verdict"]
    lines = ["Paired over seeds: the arm minus its control on the same seed's parties; [95 % interval].", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in differences.iterrows():
        cells = [str(row["cell"]), str(row["algorithm"]), f"{row['minus_algorithm']} ({row['minus_cell']})"]
        for key in OUTCOMES:
            cells += [_cell(row, key), str(row[f"{key}_verdict"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
