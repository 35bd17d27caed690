"""The portfolio party and its evaluation (paper 000 §8.2).

* :mod:`.build` — markets split by date, each party's universe, private data and fitted generator
  (:func:`build_federation`, :func:`build_party`), ``parties.csv``, the initial model;
* :mod:`.fit_cache` — the parties' fitted generators stored by a fingerprint of what the fit depends on;
* :mod:`.party` — a :class:`Party` (its agent, augmenter and sampler: the federation's per-party protocol)
  and :mod:`.group` — a :class:`PartyGroup`, the parties training in the rows of one engine;
* :mod:`.backtests` — each party's deployed model and the baselines on the held-out period (Table 1, Fig. 3a);
* :mod:`.diagnostics` — learning curves (Fig. 1a, 1b), snapshots and Fig. 1c's interpolation.
"""

from portfed.experiment.party.backtests import (
    CASH,
    TRADE_COLUMNS,
    PartyBacktest,
    backtest_agents,
    backtest_baselines,
    backtest_frames,
    backtest_party,
    backtest_party_baselines,
    party_weights,
    trades_frame,
    weights_frame,
)
from portfed.experiment.party.build import (
    PARTIES_FILE,
    Federation,
    FitReport,
    Market,
    build_federation,
    build_party,
    initial_parameters,
    load_pool,
    party_table,
    party_universe,
)
from portfed.experiment.party.diagnostics import (
    INTERPOLATION_COLUMNS,
    interpolation_curves,
    learning_curve,
    load_snapshot,
    party_interpolation,
    save_snapshot,
    snapshot_path,
    write_npz,
)
from portfed.experiment.party.fit_cache import FitCache, FitCacheError, FitCacheWarning
from portfed.experiment.party.group import PartyGroup
from portfed.experiment.party.party import Party

__all__ = [
    "CASH",
    "INTERPOLATION_COLUMNS",
    "PARTIES_FILE",
    "TRADE_COLUMNS",
    "Federation",
    "FitCache",
    "FitCacheError",
    "FitCacheWarning",
    "FitReport",
    "Market",
    "Party",
    "PartyBacktest",
    "PartyGroup",
    "backtest_agents",
    "backtest_baselines",
    "backtest_frames",
    "backtest_party",
    "backtest_party_baselines",
    "build_federation",
    "build_party",
    "initial_parameters",
    "interpolation_curves",
    "learning_curve",
    "load_pool",
    "load_snapshot",
    "party_interpolation",
    "party_table",
    "party_universe",
    "party_weights",
    "save_snapshot",
    "snapshot_path",
    "trades_frame",
    "weights_frame",
    "write_npz",
]
