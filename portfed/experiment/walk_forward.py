"""Walk-forward evaluation: the comparison on several consecutive held-out years.

With ``years = n`` and ``data.test_days = T`` the market's last ``n·T`` trading days are cut into ``n``
consecutive held-out periods.  Fold ``i`` (``0 … n − 1``, oldest first) is the whole comparison
(:func:`portfed.experiment.compare.compare`) on the market truncated after its held-out period
(``data.end`` = that period's last day): its parties train on the days before the period only and
are backtested on it, so no fold ever trains on its test year, and fold ``i + 1`` trains on fold
``i``'s test year too ("train up to year Y, test Y + 1").  Each fold retrains from scratch (the
initial model ``w^0`` of the config's seed): every fold is the same experiment shifted by one year.
Continuing from the previous fold's models instead is not offered: it needs a config key for the
initial models, which the federation config does not have yet.

Writes ``fold_<i>/`` (a comparison directory each), ``walk_forward.csv`` (one row per fold and
strategy: the fold's test period and its Table 1 row) and ``walk_forward.md`` (a table per fold and
the mean over the folds).  ``evaluation.online_steps`` applies inside every fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed.data import DataError
from portfed.evaluation import metrics_table_markdown
from portfed.experiment.build import load_pool
from portfed.experiment.compare import compare
from portfed.experiment.config import ConfigError, FederatedConfig
from portfed.validation import check_int


@dataclass(frozen=True)
class Fold:
    """Fold ``index``: its config (``data.end`` = ``test_end``) and its held-out period ``test_start … test_end``."""

    index: int
    config: FederatedConfig
    test_start: pd.Timestamp
    test_end: pd.Timestamp

    @property
    def name(self) -> str:
        return f"fold_{self.index}"


def walk_forward_folds(config: FederatedConfig, years: int) -> list[Fold]:
    """The ``years`` folds of ``config`` (module docstring).

    Raises:
        ConfigError: a cross-market config (each market has its own calendar: not supported).
        DataError: the market is too short for ``years`` held-out periods and one window of training.
    """
    years = check_int(years, "years", minimum=1)
    if config.parties.markets:
        raise ConfigError("walk-forward evaluation needs a single-market config (parties.markets is set)")
    panel = load_pool(config.data)
    test_days = config.data.test_days
    window = config.agent_config().window
    if len(panel) < years * test_days + window + 2:
        raise DataError(f"market {config.data.source!r} has {len(panel)} days: too few for {years} held-out periods "
                        f"of {test_days} days after at least {window + 2} training days")
    folds = []
    for i in range(years):
        last = len(panel) - 1 - (years - 1 - i) * test_days
        end = panel.dates[last]
        data = config.data.model_copy(update={"end": str(end.date())})
        folds.append(Fold(i, config.model_copy(update={"data": data}), panel.dates[last - test_days + 1], end))
    return folds


def walk_forward(config: FederatedConfig, out_dir: str | Path, years: int, algorithms: Sequence[str] | None = None,
                 *, progress: bool = True, n_jobs: int | None = 1) -> pd.DataFrame:
    """Run every fold's comparison into ``out_dir/fold_<i>`` and write the per-year tables (module docstring).

    Returns the rows of ``walk_forward.csv``.
    """
    out = Path(out_dir)
    rows = []
    for fold in walk_forward_folds(config, years):
        result = compare(fold.config, out / fold.name, algorithms, progress=progress, n_jobs=n_jobs)
        table = result.table.reset_index()
        table.insert(0, "test_end", str(fold.test_end.date()))
        table.insert(0, "test_start", str(fold.test_start.date()))
        table.insert(0, "fold", fold.index)
        rows.append(table)
    frame = pd.concat(rows, ignore_index=True)
    atomic_save(out / "walk_forward.csv", lambda p: frame.to_csv(p, index=False))
    atomic_write_text(out / "walk_forward.md", walk_forward_markdown(frame))
    return frame


def mean_over_folds(frame: pd.DataFrame) -> pd.DataFrame:
    """Per strategy (in first-fold order) the mean over the folds of every numeric Table 1 column."""
    numeric = [c for c in frame.columns if c not in ("fold", "test_start", "test_end", "Strategy", "Collapsed")
               and pd.api.types.is_numeric_dtype(frame[c])]
    order = list(dict.fromkeys(frame["Strategy"]))
    return frame.groupby("Strategy", sort=False)[numeric].mean().loc[order]


def walk_forward_markdown(frame: pd.DataFrame) -> str:
    """A Table 1 per fold (its held-out period in the heading) and the mean over the folds."""
    parts = []
    for fold, at in frame.groupby("fold", sort=True):
        period = f"{at['test_start'].iloc[0]} … {at['test_end'].iloc[0]}"
        table = at.drop(columns=["fold", "test_start", "test_end"]).set_index("Strategy")
        parts.append(f"## Fold {fold}: held out {period}\n\n{metrics_table_markdown(table)}")
    n = frame["fold"].nunique()
    parts.append(f"## Mean over the {n} folds\n\n{metrics_table_markdown(mean_over_folds(frame))}")
    return "\n\n".join(parts) + "\n"
