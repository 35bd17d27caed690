"""One party's trained agent, read back from a run directory.

A federated run directory (``portfed compare`` / ``portfed run`` on a ``federated`` config, or
``portfed flower launch``) holds the resolved ``config.yaml`` and, per algorithm, ``models.npz``
(whose ``deployed`` rows are the parties' deployed models ``ŵ_k``, :func:`portfed.federation.deployed_models`)
and ``weights.csv`` (the weights each deployed model held in the backtest).  On a Flower deployment a
party's node keeps the same layout for itself alone in ``<state_dir>/deployed/`` (its config, and per
algorithm ``party_<k>.npz`` and its own ``weights.csv``: :meth:`portfed.flower.node.PartyNode.evaluate`),
so the party allocates on its own machine and its prices never leave it.  The party's network is
rebuilt from the config's ``agent`` section and its universe drawn again from the config's seed
(:func:`portfed.experiment.party.build.party_universe`), so nothing else is needed.  A single-party run
(``experiment: single_party``) keeps its agent in the same layout, as algorithm ``local`` and party 0
(:mod:`portfed.experiment.runs.single_party`); its universe is the config's market
(:func:`~portfed.experiment.runs.single_party.single_party_market`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from portfed.agents import AgentConfig, EIIEPolicy
from portfed.agents.learner import actor_vector
from portfed.agents.networks import EIIENetwork, build_network, set_flat_parameters
from portfed.experiment.config import ConfigError, FederatedConfig, SinglePartyConfig, load_config
from portfed.experiment.party import Market, party_universe, party_weights
from portfed.experiment.runs import RunDirError, check_run, check_sub_run, config_fingerprint


@dataclass(frozen=True)
class TrainedParty:
    """Party ``party``'s deployed model under ``algorithm``: its parameters ``params``, the agent config
    (on the CPU), its ``tickers`` in the order the model sees them, its ``market`` (the run's prices) and
    its backtest trades (:func:`portfed.experiment.party.backtests.party_weights`; ``None`` when the backtest
    failed or the run predates ``weights.csv``)."""

    run_dir: Path
    config: FederatedConfig | SinglePartyConfig
    algorithm: str
    party: int
    params: np.ndarray
    agent: AgentConfig
    tickers: tuple[str, ...]
    market: Market
    backtest: pd.DataFrame | None

    @property
    def input_scale(self) -> str:
        """What the network does to the normalized window before its first layer: ``centred``
        (``history − 1``) or ``raw`` (``agent.input_scale``, :class:`portfed.agents.networks.EIIENetwork`);
        recorded with every allocation and export."""
        return self.agent.input_scale

    def network(self) -> EIIENetwork:
        """A fresh CPU network holding the deployed parameters."""
        net = build_network(self.agent, 0)
        set_flat_parameters(net, actor_vector(self.agent, self.params))
        return net.eval()

    def policy(self) -> EIIEPolicy:
        """The greedy policy of the deployed model (the one the backtest traded with)."""
        return EIIEPolicy(self.network(), self.agent, name=self.algorithm)


def load_trained_party(run_dir: str | Path, algorithm: str, party: int) -> TrainedParty:
    """Party ``party``'s deployed model under ``algorithm`` from the run directory ``run_dir``.

    Raises:
        RunDirectoryError: no (readable) ``config.yaml``, no such algorithm (no
            ``<algorithm>/models.npz``) or no such party; a run or sub-run that is unfinished or of
            another config (:func:`check_finished`); a comparison run with ``evaluation.disclosure:
            averaged`` (:mod:`portfed.experiment.reports.disclosure`; a node's ``deployed/`` is read).
    """
    from portfed.deploy.errors import RunDirectoryError

    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise RunDirectoryError(f"{run} is not a run directory: it has no config.yaml")
    try:
        config = load_config(run / "config.yaml")
    except ConfigError as exc:
        raise RunDirectoryError(f"{run}/config.yaml cannot be read: {exc}") from exc
    count = config.parties.count if isinstance(config, FederatedConfig) else 1
    if isinstance(party, bool) or not isinstance(party, int | np.integer) or not 0 <= party < count:
        raise RunDirectoryError(f"{run} has no party {party!r}: its parties are 0 … {count - 1}", party=party)
    trained = sorted(d.name for d in run.iterdir() if _model_file(d, int(party)) is not None)
    if algorithm not in trained:
        raise RunDirectoryError(f"{run} has no trained algorithm {algorithm!r} for party {party}; it holds {trained}",
                                algorithm=algorithm)
    file = _model_file(run / algorithm, int(party))
    check_finished(run, config, algorithm, file)
    if file.name == "models.npz" and isinstance(config, FederatedConfig) and config.evaluation.disclosure == "averaged":
        raise RunDirectoryError(f"{run} was run with evaluation.disclosure=averaged: its parties' models are not "
                                "traded from the comparison directory (that would reproduce the per-party results "
                                "it withholds); use the party's own node directory (deployed/) or a per_party run",
                                algorithm=algorithm)
    with np.load(file) as models:
        if "deployed" not in models.files:  # a Flower run under privacy.mode local: the server has noisy messages only
            raise RunDirectoryError(f"{file} holds no deployed models: its parties deployed their own (local DP on "
                                    "Flower); use the party's node directory, <state-dir>/deployed", algorithm=algorithm)
        deployed = models["deployed"]
        params = np.array(deployed[party] if file.name == "models.npz" else deployed, dtype=np.float64)
    if isinstance(config, FederatedConfig):
        market, tickers = party_universe(config, int(party))
    else:
        from portfed.experiment.runs import single_party_market

        market = single_party_market(config)
        tickers = market.panel.tickers
    weights_file = run / algorithm / "weights.csv"
    backtest = None
    if weights_file.is_file():
        weights = pd.read_csv(weights_file, parse_dates=["date"])
        if (weights["party"] == party).any():
            backtest = party_weights(weights, int(party))[["value", "turnover", "cost", "cash", *tickers]]
    agent = dataclasses.replace(config.agent_config(), device="cpu")
    return TrainedParty(run, config, algorithm, int(party), params, agent, tickers, market, backtest)


def check_finished(run: Path, config: FederatedConfig, algorithm: str, models: Path) -> None:
    """Refuse a run directory whose ``config.yaml`` another run overwrote, and an ``algorithm`` sub-run of
    another config or not finished (:mod:`portfed.experiment.runs.run_dir`) — an unfinished run's models were
    never backtested, and its missing backtest must not read as an all-cash portfolio.  A directory
    without ``run.json`` (older portfed, or a Flower node's ``deployed/``) is accepted with a
    :class:`~portfed.experiment.runs.run_dir.LegacyRunWarning` when its sub-run has its ``weights.csv``.

    Raises:
        RunDirectoryError: naming the directory and what is wrong.
    """
    from portfed.deploy.errors import RunDirectoryError

    fingerprint = config_fingerprint(config)
    try:
        parent = check_run(run, fingerprint, finished=False)
        check_sub_run(run / algorithm, algorithm, fingerprint, parent)
    except RunDirError as exc:
        raise RunDirectoryError(str(exc), algorithm=algorithm) from None
    if parent is None and models.name == "models.npz" and not (run / algorithm / "weights.csv").is_file():
        raise RunDirectoryError(f"{run / algorithm} has models but no weights.csv: its run never finished its "
                                "backtests; finish it with --resume", algorithm=algorithm)


def _model_file(sub_run: Path, party: int) -> Path | None:
    """The deployed models of a sub-run directory: the run's ``models.npz`` (every party) or, in a Flower
    node's ``deployed/`` directory, the party's own ``party_<k>.npz``; ``None`` when it has neither."""
    for name in ("models.npz", f"party_{party}.npz"):
        if (sub_run / name).is_file():
            return sub_run / name
    return None
