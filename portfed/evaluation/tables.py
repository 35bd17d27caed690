"""Metrics tables: a DataFrame (strategies as rows) rendered as CSV, Markdown and a rich table.

Hindsight strategies (built with the test period's prices) are labelled "(hindsight)" in the row
name, so no table can present them as tradeable.  Sharpe ratios appear twice, per period
(``E[X]/sqrt(var X)``, as the papers report) and annualized (``√252`` times that), each labelled.

**Units.**  Every column label names its unit in its last parentheses: ``(fraction)`` for returns,
volatilities, drawdowns and the like, stored as fractions (0.05 is 5 %) in the frames and CSV files; a
ratio's label says what kind (``Sharpe ratio (annualized)``).  The tables people read — Markdown and
the terminal (:func:`metrics_table_markdown`, :func:`metrics_rich_table`) — show those columns in
percent (:func:`in_percent`: ``(fraction)`` becomes ``(%)``, the values × 100).  A frame's
``attrs["note"]`` (say, that annualized figures come from a short period) is printed under both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
from rich.table import Table

from portfed._io import atomic_save, atomic_write_text
from portfed.evaluation.backtest import BacktestResult

#: Column labels of the summary keys of :func:`~portfed.evaluation.metrics.summarize`, in table order.
METRIC_LABELS: dict[str, str] = {
    "fapv": "fAPV (× initial value)",
    "annualized_return": "Annualized return (fraction)",
    "annualized_volatility": "Annualized volatility (fraction)",
    "sharpe": "Sharpe ratio (annualized)",
    "sharpe_per_period": "Sharpe ratio (daily)",
    "sortino": "Sortino ratio (annualized)",
    "max_drawdown": "Max drawdown (fraction)",
    "calmar": "Calmar ratio (annualized return / max drawdown)",
    "turnover": "Turnover (fraction of value per day)",
}
#: Labels of :data:`~portfed.evaluation.relative.RELATIVE_METRICS`, ``{benchmark}`` to be filled in.
RELATIVE_LABELS: dict[str, str] = {
    "tracking_error": "Tracking error vs {benchmark} (annualized, fraction)",
    "information_ratio": "Information ratio vs {benchmark} (annualized)",
    "alpha": "Alpha vs {benchmark} (annualized, fraction)",
    "beta": "Beta vs {benchmark} (regression slope)",
    "up_capture": "Up capture vs {benchmark} (fraction)",
    "down_capture": "Down capture vs {benchmark} (fraction)",
}
#: The unit word of the columns :func:`in_percent` converts, and what it becomes.
FRACTION, PERCENT = "fraction", "%"
#: Annualizing fewer returns than this (half a trading year) earns a warning.
SHORT_PERIOD_DAYS = 126

HINDSIGHT_SUFFIX = " (hindsight)"


def relative_labels(benchmark: str) -> dict[str, str]:
    """:data:`RELATIVE_LABELS` against the benchmark named ``benchmark``."""
    return {key: label.format(benchmark=benchmark) for key, label in RELATIVE_LABELS.items()}


def qualified(label: str, word: str) -> str:
    """``label`` with ``word`` before its unit: ``qualified("MDD (fraction)", "std")`` is ``"MDD std (fraction)"``."""
    name, sep, unit = label.rpartition(" (")
    return f"{name} {word} ({unit}" if sep and unit.endswith(")") else f"{label} {word}"


def is_fraction(label: str) -> bool:
    """Whether the column ``label`` holds fractions: its last parentheses, the unit, name ``fraction``."""
    name, sep, unit = str(label).rpartition(" (")
    return bool(sep) and unit.endswith(")") and FRACTION in unit


def in_percent(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with every fraction column (:func:`is_fraction`) in percent: the values × 100 and
    ``fraction`` in the label's unit becomes ``%``; other columns (and ``attrs``) as they are."""
    out = frame.copy()
    renamed = {}
    for column in frame.columns:
        if is_fraction(column) and pd.api.types.is_numeric_dtype(frame[column]):
            out[column] = frame[column] * 100.0
            name, _, unit = str(column).rpartition(" (")
            renamed[column] = f"{name} ({unit.replace(FRACTION, PERCENT, 1)}"
    out = out.rename(columns=renamed)
    out.attrs = dict(frame.attrs)
    return out


def short_period_note(days: int) -> str | None:
    """The warning on annualized figures from ``days`` returns, when fewer than :data:`SHORT_PERIOD_DAYS`."""
    if days >= SHORT_PERIOD_DAYS:
        return None
    return (f"Annualized figures come from {days} trading days (fewer than {SHORT_PERIOD_DAYS}, half a year): "
            "extrapolated, they are noisy; read fAPV and the max drawdown first.")


def table_note(days: int, benchmark: str | None = None, risk_free: float | None = None, *extra: str) -> str:
    """A table's note: the held-out period's length, the benchmark and risk-free rate, ``extra`` sentences and
    the short-period warning (:func:`short_period_note`)."""
    parts = [f"Held-out period: {days} trading days."]
    if benchmark is not None:
        rate = "" if risk_free is None else f"; risk-free rate {100 * risk_free:g} % a year"
        parts.append(f"Benchmark: {benchmark}{rate}.")
    short = short_period_note(days)
    return " ".join([*parts, *extra, *([f"Warning: {short}"] if short else [])])


def display_name(name: str, hindsight: bool) -> str:
    """``name`` with " (hindsight)" appended for hindsight strategies."""
    return f"{name}{HINDSIGHT_SUFFIX}" if hindsight else name


def metrics_table(results: Mapping[str, BacktestResult], risk_free: float = 0.0) -> pd.DataFrame:
    """One row per backtest (``result.summary(risk_free)``), hindsight rows labelled."""
    return table_from_summaries(
        {name: r.summary(risk_free) for name, r in results.items()},
        hindsight=[name for name, r in results.items() if r.hindsight],
    )


def table_from_summaries(
    summaries: Mapping[str, Mapping[str, float]], hindsight: Iterable[str] = ()
) -> pd.DataFrame:
    """Rows named by strategy (hindsight ones labelled), columns :data:`METRIC_LABELS` present in any row.

    Raises:
        ValueError: no rows, a ``hindsight`` name that is not a row, or an unknown metric key.
    """
    if not summaries:
        raise ValueError("a metrics table needs at least one strategy")
    hindsight = set(hindsight)
    missing = sorted(hindsight - set(summaries))
    if missing:
        raise ValueError(f"hindsight strategy {missing[0]!r} has no summary")
    keys = {k for s in summaries.values() for k in s}
    unknown = sorted(keys - set(METRIC_LABELS))
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; known: {list(METRIC_LABELS)}")
    columns = [k for k in METRIC_LABELS if k in keys]
    rows = {
        display_name(name, name in hindsight): [s.get(k, math.nan) for k in columns]
        for name, s in summaries.items()
    }
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=[METRIC_LABELS[k] for k in columns])
    frame.index.name = "Strategy"
    return frame


def metrics_table_markdown(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table (:func:`human_cells`: index as the first column, fractions in percent,
    a mean and its std in one cell), ``attrs["note"]`` as a paragraph under it."""
    header, rows = human_cells(frame, digits)
    lines = [_md_row(header), "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |"]
    lines += [_md_row(r) for r in rows]
    note = frame.attrs.get("note")
    return "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "")


def metrics_rich_table(frame: pd.DataFrame, title: str | None = None, digits: int = 4) -> Table:
    """The same table for the terminal (``rich.console.Console().print(table)``), ``attrs["note"]`` as its caption."""
    header, rows = human_cells(frame, digits)
    table = Table(title=title, caption=frame.attrs.get("note"), caption_justify="left")
    table.add_column(header[0], justify="left")
    for col in header[1:]:
        table.add_column(col, justify="right")
    for cells in rows:
        table.add_row(*cells)
    return table


def human_cells(frame: pd.DataFrame, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """The header and text rows of a table for people: fractions in percent (:func:`in_percent`, with two
    decimals fewer), and a column whose std has a column too (``qualified(label, "std")``) shown as
    ``mean (std)`` in one cell, the std column dropped."""
    shown = in_percent(frame)
    percent = {c for c in shown.columns if c not in frame.columns}
    spread = {c: qualified(str(c), "std") for c in shown.columns if qualified(str(c), "std") in shown.columns}
    columns = [c for c in shown.columns if c not in set(spread.values())]
    header = [str(frame.index.name or ""), *map(str, columns)]
    rows = []
    for idx, (_, row) in zip(shown.index, shown.iterrows(), strict=True):
        cells = [str(idx)]
        for c in columns:
            places = max(digits - 2, 0) if c in percent else digits
            text = _cell(row[c], places)
            cells.append(f"{text} ({_cell(row[spread[c]], places)})" if c in spread else text)
        rows.append(cells)
    return header, rows


def write_tables(
    frame: pd.DataFrame, directory: str | os.PathLike[str], stem: str = "metrics"
) -> tuple[Path, Path]:
    """Write ``<stem>.csv`` (full precision) and ``<stem>.md`` into ``directory``, each atomically."""
    directory = Path(directory)
    csv_path = atomic_save(directory / f"{stem}.csv", lambda tmp: frame.to_csv(tmp))
    md_path = atomic_write_text(directory / f"{stem}.md", metrics_table_markdown(frame))
    return csv_path, md_path


def _cell(value: object, digits: int) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.{digits}f}"
    return str(value)  # text, integers, nan and ±inf as themselves


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
