"""Walk-forward evaluation: the comparison on several consecutive held-out years.

With ``years = n`` and ``data.test_days = T`` the market's last ``n·T`` trading days are cut into ``n``
consecutive held-out periods.  Fold ``i`` (``0 … n − 1``, oldest first) is the whole comparison
(:func:`portfed.experiment.studies.compare.compare`) on the market truncated after its held-out period
(``data.end`` = that period's last day): its parties train on the days before the period only and
are backtested on it, so no fold ever trains on its test year, and fold ``i + 1`` trains on fold
``i``'s test year too ("train up to year Y, test Y + 1").  Two modes (:data:`MODES`):

* ``retrain`` (the default): every fold trains from scratch (the initial models ``W^0`` of the
  config's seed, :func:`~portfed.experiment.party.build.initial_parameters`): every fold is the same
  experiment shifted by one year.
* ``continue``: fold ``i + 1``'s run of each algorithm starts from fold ``i``'s final federation state
  of that algorithm (:attr:`Comparison.states <portfed.experiment.reports.Comparison>`), then trains
  its ``federation.rounds`` rounds on the data up to its own cut, i.e. with fold ``i``'s test year
  added to the training data.  What carries over is what the federation has learned
  (:meth:`FederationState.restarted <portfed.federation.FederationState.restarted>`): the party
  models, the global model, FedAMP's centres and the personalised baselines' extras.  What starts
  afresh in every fold, as in ``retrain``: the round counter (so the λ_t, σ_t, α_t schedules, the
  faults' rounds and ``diagnostics.interpolation_rounds`` are per fold and the deployed model is that
  of round ``rounds`` in both modes), the party sampling (reseeded from ``seed``), and each party's own
  training state — its Adam moments, portfolio vector memory and sampler — which is not taken from
  fold ``i``'s checkpoint: the memory has one row per training day, so it does not fit the longer
  training period, and the parties are rebuilt on the new cut (a fresh optimizer, as after
  ``federation.optimizer_state: reset``).  Fold 0 is the same run in both modes.  The parties must
  trade the same universes in every fold (checked before any training).

The fault-free reruns of a robustness table continue from their own previous fold.  Writes
``fold_<i>/`` (a comparison directory each), ``walk_forward.csv`` (one row per fold and strategy: the
fold, the mode, the fold's test period and its Table 1 row) and ``walk_forward.md`` (a table per fold
and the mean over the folds).  ``evaluation.online_steps`` applies inside every fold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed.data import DataError
from portfed.evaluation import metrics_table_markdown
from portfed.experiment.config import ConfigError, FederatedConfig
from portfed.experiment.party import load_pool, party_table
from portfed.experiment.runs import claim, config_fingerprint
from portfed.experiment.studies.compare import Comparison, compare
from portfed.federation import FederationState
from portfed.sweep import Executor
from portfed.validation import check_int

#: How fold ``i + 1`` starts (module docstring): from scratch, or from fold ``i``'s final federation states.
MODES: tuple[str, ...] = ("retrain", "continue")
#: The columns of ``walk_forward.csv`` that say which fold a row belongs to (before the Table 1 columns).
FOLD_COLUMNS: tuple[str, ...] = ("fold", "mode", "test_start", "test_end")


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
                 *, mode: str = "retrain", progress: bool = True, n_jobs: int | Executor | None = 1,
                 force: bool = False) -> pd.DataFrame:
    """Run every fold's comparison into ``out_dir/fold_<i>`` — each from scratch (``mode="retrain"``) or
    from the previous fold's final states (``"continue"``) — and write the per-year tables (module docstring).

    Returns the rows of ``walk_forward.csv``.  ``out_dir`` is locked and gets its own ``run.json`` (kind
    ``walk_forward``, :func:`walk_forward_fingerprint`); a directory holding another walk-forward (or
    anything else) is refused unless ``force``, which every fold's comparison then gets too.

    Raises:
        ValueError: an unknown ``mode``; in ``continue`` mode, a party whose universe differs between folds.
        RunDirError: ``out_dir`` (or a fold's) holds another run, or another process is writing it.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    folds = walk_forward_folds(config, years)
    if mode == "continue":
        check_same_universes(folds)
    out = Path(out_dir)
    rows = []
    previous: Comparison | None = None
    with claim(out, "walk_forward", walk_forward_fingerprint(config, years, mode), force=force,
               years=years, mode=mode):
        for fold in folds:
            start = None if mode == "retrain" or previous is None else continued_states(previous)
            previous = compare(fold.config, out / fold.name, algorithms, progress=progress, n_jobs=n_jobs,
                               start=start, force=force)
            table = previous.table.reset_index()
            labels = dict(zip(FOLD_COLUMNS, (fold.index, mode, str(fold.test_start.date()),
                                             str(fold.test_end.date())), strict=True))
            rows.append(pd.concat([pd.DataFrame(labels, index=table.index), table], axis=1))
        frame = pd.concat(rows, ignore_index=True)
        atomic_save(out / "walk_forward.csv", lambda p: frame.to_csv(p, index=False))
        atomic_write_text(out / "walk_forward.md", walk_forward_markdown(frame))
    return frame


def walk_forward_fingerprint(config: FederatedConfig, years: int, mode: str) -> str:
    """What a walk-forward directory's ``run.json`` records: the config's fingerprint
    (:func:`portfed.experiment.runs.run_dir.config_fingerprint`), the number of folds and the mode."""
    key = {"config": config_fingerprint(config), "years": years, "mode": mode}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def continued_states(previous: Comparison) -> dict[str, FederationState]:
    """The states the next fold's runs start from in ``continue`` mode: every run's final state of
    ``previous`` (by run name), restarted (:meth:`FederationState.restarted`)."""
    if previous.states is None:
        raise ValueError("the previous fold's comparison holds no final states")
    return {name: state.restarted() for name, state in previous.states.items()}


def check_same_universes(folds: Sequence[Fold]) -> None:
    """Refuse folds whose parties trade different tickers (``continue`` mode carries each party's model
    into the next fold, which is meaningful only on the same assets in the same order).

    Raises:
        ValueError: naming the first fold and parties whose tickers differ from fold 0's.
    """
    first = party_table(folds[0].config)["tickers"].tolist()
    for fold in folds[1:]:
        tickers = party_table(fold.config)["tickers"].tolist()
        moved = [k for k, (a, b) in enumerate(zip(first, tickers, strict=True)) if a != b]
        if moved:
            raise ValueError(f"continue mode needs the same universes in every fold; in fold {fold.index} "
                             f"parties {moved} trade other tickers than in fold 0")


def fold_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One fold's rows of ``walk_forward.csv`` as its Table 1 (indexed by strategy, no fold columns)."""
    return rows.drop(columns=list(FOLD_COLUMNS)).set_index("Strategy")


def fold_title(rows: pd.DataFrame) -> str:
    """``"Fold i (mode): held out start … end"`` of one fold's rows of ``walk_forward.csv``."""
    first = rows.iloc[0]
    return f"Fold {first['fold']} ({first['mode']}): held out {first['test_start']} … {first['test_end']}"


def mean_over_folds(frame: pd.DataFrame) -> pd.DataFrame:
    """Per strategy (in first-fold order) the mean over the folds of every numeric Table 1 column."""
    numeric = [c for c in frame.columns if c not in (*FOLD_COLUMNS, "Strategy", "Collapsed")
               and pd.api.types.is_numeric_dtype(frame[c])]
    order = list(dict.fromkeys(frame["Strategy"]))
    return frame.groupby("Strategy", sort=False)[numeric].mean().loc[order]


def walk_forward_markdown(frame: pd.DataFrame) -> str:
    """A Table 1 per fold (its mode and held-out period in the heading) and the mean over the folds."""
    parts = [f"## {fold_title(at)}\n\n{metrics_table_markdown(fold_table(at))}"
             for _, at in frame.groupby("fold", sort=True)]
    parts.append(f"## {mean_title(frame)}\n\n{metrics_table_markdown(mean_over_folds(frame))}")
    return "\n\n".join(parts) + "\n"


def mean_title(frame: pd.DataFrame) -> str:
    """``"Mean over the n folds (mode)"`` of the rows of ``walk_forward.csv``."""
    return f"Mean over the {frame['fold'].nunique()} folds ({frame['mode'].iloc[0]})"
