"""The single-party experiment: train one EIIE agent, backtest it on the held-out year.

Information flow (no test data reaches training or model selection):

* the market is split by date: the last ``test_days`` trading days are the held-out year;
* the agent is a :class:`~portfed.experiment.party.Party` and trains on the training part only,
  optionally extended by its private generator's synthetic year (paper 001 §9.3) on the party's own
  augmentation schedule: iteration ``i`` trains on synthetic block ``⌊i / regenerate_every⌋``, exactly
  as a party of a federation does (:mod:`portfed.generators.augment`); with ``validation_days > 0``
  a validation slice is cut from the *end of the training part*, training stops using it, and the
  checkpoint with the best validation log return is kept (model selection never sees the test year);
* the backtest trades the held-out year through :class:`~portfed.envs.PortfolioEnv`: the first
  decision is at the close of the last training day (its window is training history, known then),
  so the 252 price relatives of the held-out year are all traded.  Every baseline runs through the
  same environment and pays the same commission.

The trained agent is saved in the run-directory layout of a federated run's sub-run
(:mod:`portfed.deploy.trained`), as the algorithm :data:`SINGLE_PARTY_ALGORITHM` and party 0:
``local/models.npz`` (``deployed``: the ``(1, d)`` federated vector, the validation-selected one when
``validation_days > 0``) and ``local/weights.csv`` (the agent's held-out trades,
:func:`~portfed.experiment.party.backtests.weights_frame`), so ``portfed allocate RUN --algorithm local --party 0``
and ``portfed export`` work on a single-party run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed._progress import progress_bar
from portfed.agents import make_baselines
from portfed.agents.batched import resolved_backend
from portfed.agents.objective import greedy_log_return
from portfed.data import PricePanel, load_market, sample_universes, train_test_split, validation_split
from portfed.envs import PortfolioEnv
from portfed.evaluation import (
    backtest_all,
    metrics_table,
    plot_learning_curve,
    plot_portfolio_values,
    write_tables,
)
from portfed.evaluation.backtest import BacktestResult
from portfed.evaluation.benchmark import parse_benchmark, relative_frame
from portfed.evaluation.tables import display_name, relative_labels, short_period_note, table_note
from portfed.experiment.config import SinglePartyConfig, dump_config
from portfed.experiment.party import Market, Party, PartyBacktest, weights_frame, write_npz
from portfed.experiment.runs.run_dir import (
    claim,
    config_fingerprint,
    directory_config_fingerprint,
    write_record,
)
from portfed.generators import Augmenter, make_generator

logger = logging.getLogger(__name__)

#: The algorithm name (sub-directory) of a single-party run's saved agent: trained on one party's data
#: alone, as ``local`` training is in a federated comparison.
SINGLE_PARTY_ALGORITHM = "local"


@dataclass
class SinglePartyResult:
    """What a single-party run produced (also written to its run directory)."""

    tickers: tuple[str, ...]
    learning_curve: pd.DataFrame
    metrics: pd.DataFrame
    values: pd.DataFrame


def select_market(config: SinglePartyConfig) -> PricePanel:
    """The party's market: the configured tickers, or ``n_assets`` drawn from the source with the seed."""
    data = config.data
    panel = load_market(data.source, tickers=data.tickers, start=data.start, end=data.end)
    if data.tickers is None and data.n_assets is not None and data.n_assets < panel.n_assets:
        (tickers,) = sample_universes(panel.tickers, 1, data.n_assets, config.seed)
        panel = panel.select(list(tickers))
    return panel


def single_party_market(config: SinglePartyConfig) -> Market:
    """The run's market (:func:`select_market`) and its last training close, as :func:`run_single_party`
    splits it: what the saved agent is fed at the desk."""
    market = select_market(config)
    train, _ = train_test_split(market, config.data.test_days)
    return Market(config.data.source, market, train.dates[-1])


def run_single_party(config: SinglePartyConfig, out_dir: str | Path, progress: bool = True, *,
                     force: bool = False) -> SinglePartyResult:
    """Train, backtest and write the run directory ``out_dir`` (under its lock, with its ``run.json``:
    :func:`portfed.experiment.runs.run_dir.claim`; another config's run there is refused unless ``force``; it
    records the backend the party trains on, :mod:`portfed.agents.backend`)."""
    out = Path(out_dir)
    backend = resolved_backend(config.agent_config())
    logger.info("single party: training on the %s backend", backend)
    with claim(out, "single_party", config_fingerprint(config), force=force,
               legacy_fingerprint=directory_config_fingerprint(out), backend=backend):
        return _run(config, out, progress)


def _run(config: SinglePartyConfig, out: Path, progress: bool) -> SinglePartyResult:
    atomic_write_text(out / "config.yaml", dump_config(config))

    agent_cfg = config.agent_config()
    market = select_market(config)
    train, test = train_test_split(market, config.data.test_days)
    fit, validation = (train, None)
    if config.data.validation_days:
        fit, _ = validation_split(train, config.data.validation_days)
        # The validation episode starts at the last fitting close: its window is fitting history.
        validation = train.iloc(slice(len(fit) - agent_cfg.window, None)).select_features(agent_cfg.features)

    augmenter = None
    if config.augmentation.generator is not None:
        generator = make_generator(config.augmentation.generator, **config.augmentation.params)
        augmenter = Augmenter(
            generator,
            synthetic_days=config.augmentation.synthetic_days,
            regenerate_every=config.augmentation.regenerate_every,
            seed=config.seed,
        ).fit(fit)
    party = Party(0, fit, agent_cfg, config.seed, augmenter)
    curve, params = _train(config, party, validation, progress)

    env_panel = market.select_features(agent_cfg.features)
    test_start = train.dates[-1]

    def make_env() -> PortfolioEnv:
        return PortfolioEnv(
            env_panel,
            window_size=agent_cfg.window,
            commission=agent_cfg.commission,
            cost_model=config.evaluation.cost_model,
            start=test_start,
        )

    agent_name = f"EIIE-{agent_cfg.network.upper()}"
    policies = [party.policy(params, agent_name)]
    policies += make_baselines(market.close, test_start, names=config.evaluation.baselines,
                               optimisation=config.evaluation.optimisation.schedule())
    results = backtest_all(policies, make_env, progress=progress)

    metrics = single_party_table(config, results)
    values = pd.DataFrame({name: r.value_series for name, r in results.items()})
    atomic_save(out / "training_curve.csv", lambda p: curve.to_csv(p, index=False))
    reward_columns = [c for c in curve.columns if c.endswith("log_return")]
    plot_learning_curve(curve, out / "training_curve.png", x="step", columns=reward_columns,
                        title="Mean daily log return of the training batches")
    write_tables(metrics, out, stem="metrics")
    atomic_save(out / "portfolio_values.csv", lambda p: values.to_csv(p))
    plot_portfolio_values(results, out / "portfolio_values.png", title=f"Held-out year {test.dates[0].date()} … {test.dates[-1].date()}")
    save_agent(out / SINGLE_PARTY_ALGORITHM, params[None],
               PartyBacktest.of(SINGLE_PARTY_ALGORITHM, 0, results[agent_name], market.tickers),
               config_fingerprint(config))
    return SinglePartyResult(market.tickers, curve, metrics, values)


def single_party_table(config: SinglePartyConfig, results: dict[str, BacktestResult]) -> pd.DataFrame:
    """The metrics table of the backtests (``evaluation.risk_free`` in the Sharpe and Sortino ratios), the
    metrics against ``evaluation.benchmark`` beside them, and a note naming the period, the benchmark and
    the risk-free rate (warning on a short period; :func:`portfed.evaluation.tables.table_note`)."""
    risk_free = config.evaluation.risk_free
    metrics = metrics_table(results, risk_free)
    benchmark = parse_benchmark(config.evaluation.benchmark, config.evaluation.baselines)
    label, relative = relative_frame({name: r.value_series for name, r in results.items()}, benchmark, risk_free)
    relative.index = [display_name(name, r.hindsight) for name, r in results.items()]
    table = pd.concat([metrics, relative.rename(columns=relative_labels(label))], axis=1)
    table.index.name = metrics.index.name
    days = min(len(r.values) - 1 for r in results.values())
    table.attrs["note"] = table_note(days, label, risk_free)
    if short_period_note(days):
        logger.warning("single-party run: %s", short_period_note(days))
    return table


def save_agent(directory: Path, deployed: np.ndarray, backtest: PartyBacktest, config: str) -> None:
    """``models.npz`` (``deployed``: ``(1, d)``) and ``weights.csv`` of the agent in ``directory``, the files
    :func:`portfed.deploy.load_trained_party` reads (module docstring), each written atomically, then the
    sub-run's finished ``run.json`` for the run of config fingerprint ``config`` (what the desk checks)."""
    if deployed.ndim != 2 or deployed.shape[0] != 1:
        raise ValueError(f"a single party's deployed models must have shape (1, d), got {deployed.shape}")
    atomic_save(directory / "models.npz", lambda p: write_npz(p, deployed=deployed))
    weights = weights_frame([backtest])
    atomic_save(directory / "weights.csv", lambda p: weights.to_csv(p, index=False))
    write_record(directory, "algorithm", config, status="finished", algorithm=SINGLE_PARTY_ALGORITHM, config=config)


def _train(config: SinglePartyConfig, party: Party, validation: PricePanel | None,
           progress: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """Train the party in chunks of ``log_every`` iterations, one learning-curve row per chunk; return the
    curve and the federated vector to deploy: the last one, or with a ``validation`` panel the one of the
    chunk with the best greedy validation log return.

    Every iteration goes through :meth:`Party.local_train`, so iteration ``i`` trains on the party's
    augmentation schedule's panel ``i`` (synthetic block ``⌊i / regenerate_every⌋``) whether or not
    ``log_every`` divides ``regenerate_every`` — as a party of a federation does."""
    steps, every = config.training.steps, config.training.log_every
    rows, params, best_params, best_score = [], None, None, -np.inf
    done = 0
    with progress_bar("training EIIE", total=steps, enabled=progress) as advance:
        while done < steps:
            chunk = min(every, steps - done)
            result = party.local_train(None, chunk)
            params, records = result.params, result.records
            done += chunk
            row = {
                "step": done,
                "train_log_return": float(np.mean([r.mean_log_return for r in records])),
                "loss": float(np.mean([r.loss for r in records])),
            }
            if validation is not None:
                net = party.policy(params, "validation").net
                row["validation_log_return"] = greedy_log_return(net, party.agent_config, validation)
                if row["validation_log_return"] > best_score:
                    best_score, best_params = row["validation_log_return"], params
            rows.append(row)
            advance(chunk)
    return pd.DataFrame(rows), params if best_params is None else best_params
