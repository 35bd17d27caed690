"""One party on its own machine: what a SuperNode's ClientApp does with the server's messages.

Nothing here imports Flower: :mod:`portfed.flower.client` decodes a message, calls one method of
:class:`PartyNode` and encodes its answer.  The party is built from the node's own copy of the
experiment config (:func:`portfed.experiment.party.build.build_party`: only its market is loaded and only
its generator fitted — once: the fit is kept in the node's fit cache, so later messages load it).
Its data, generator, agent, Adam moments and PVM never leave the node; only parameter vectors, the
plan's scalars and metrics are returned.  Under ``evaluation.disclosure: averaged`` in the node's own
config its evaluation returns the scalar metrics rows only (:class:`MetricsReply`): its value paths,
weights and Fig. 1c rows stay on the node.

**State on the node's disk.**  A ClientApp process lives for one message, and a SuperNode's memory
is lost when it restarts, so the party's training state is a file:
``<state_dir>/runs/<run>/party_<k>/round_<t>.pt`` (:func:`~portfed.experiment.runs.checkpoint.save_checkpoint`,
written atomically, keyed by the run's fingerprint) after it trained in round ``t``.  A message for
round ``t`` starts from the newest state of an earlier round — so a server that resumes from its
checkpoint and sends round ``t`` again gets the party as it was before round ``t``, bit for bit.
States the server can no longer ask for (older than the newest one before its last checkpoint,
``committed``) are deleted.

**Local differential privacy where the data is.**  Under ``privacy.mode: local`` the server must never see the
party's model ``w_k``: it sends the reference ``r_k`` (``w̃``, or the FedAMP centre) instead of a plan, and the
node makes the round itself (:meth:`PartyNode.train_private`) — the algorithm's Local-Solve of its own ``w_k``
(the model it trained last, kept in its state; before any training its row of ``W^0``) and ``r_k``, the
local iterations, then the message ``r_k + clip_S(w_k − r_k) + N(0, (zS)² I)`` with noise the server cannot
predict, seeded by the node's secret key (or, for checking a deployment against the simulation, the in-process
draw; :mod:`portfed.flower.local_noise`, which also refuses a second, different request for a round it
answered).  S and z come from the node's own config (the server's cannot lower them; its digest
then covers the federation and privacy sections, :func:`config_digest`).  At evaluation the node deploys its
own model (:class:`OwnDeployment`).

**What the server sends is checked before it touches the disk.**  A run key must be a hexadecimal
fingerprint and an algorithm name one of portfed's registered algorithms (``ALGORITHMS``), so no
name the server sends can make a path outside ``state_dir`` (``../../x`` is refused with a reason,
before any work or file; the server sees it as the node's error reply).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from portfed._io import atomic_save, atomic_write_text
from portfed.agents.records import StepRecord
from portfed.evaluation.benchmark import held_out_days, parse_benchmark, with_relative_metrics
from portfed.experiment.config import FederatedConfig, dump_config
from portfed.experiment.party import (
    FitCache,
    Market,
    Party,
    PartyBacktest,
    backtest_frames,
    backtest_party,
    backtest_party_baselines,
    build_party,
    initial_parameters,
    party_interpolation,
    weights_frame,
    write_npz,
)
from portfed.experiment.runs import load_checkpoint, make_spec, save_checkpoint, without_new_defaults
from portfed.federation import LocalObjective
from portfed.federation.algorithms import ALGORITHMS, Algorithm, solved_by_parties
from portfed.flower.local_noise import check_noise_source, check_request, message_noise, request_digest
from portfed.privacy.mechanism import local_message
from portfed.validation import check_int

_STATE = re.compile(r"round_(\d{6})\.pt")


def sends_private(config: FederatedConfig) -> bool:
    """Whether the parties of ``config`` clip and noise their own messages (``privacy.mode: local``)."""
    return config.privacy is not None and config.privacy.mode == "local"


def config_digest(config: FederatedConfig) -> str:
    """A hash of what a party is built and evaluated from (the seed, data, parties, agent, diagnostics and
    evaluation sections of the resolved config): the server refuses a node whose party would differ
    from the one its own config describes.  Under ``privacy.mode: local`` the node plans its rounds and draws
    its noise itself, so the privacy section and the federation section (all but the list of algorithms,
    which the server's ``--algorithms`` narrows) are in it too."""
    key = without_new_defaults(config.model_dump(mode="json", include={"seed", "data", "parties", "agent",
                                                                        "diagnostics", "evaluation"}))
    if sends_private(config):
        key |= config.model_dump(mode="json", include={"privacy"})
        key["federation"] = config.federation.model_dump(mode="json", exclude={"algorithms"})
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrainReply:
    """A party's answer to a train message: its new flat parameters, the means over its local steps of
    the training reward, the loss and the cash weight its policy chose (NaN for no step), and its config
    digest (:func:`config_digest`)."""

    params: np.ndarray
    reward: float
    loss: float
    cash: float
    digest: str


@dataclass(frozen=True)
class OwnDeployment:
    """What the server sends in place of a party's deployed model under ``privacy.mode: local``, where it holds only
    the party's noisy messages: the ``run`` key, the ``rounds`` run ``T`` and the ``reference`` ``r_k`` (``w̃``, or
    the FedAMP centre) of the last round; the node deploys ``algorithm.deploy(w_k, r_k, T)`` of its own model."""

    run: str
    rounds: int
    reference: np.ndarray


#: One algorithm's deployed model of a party (or what the party makes it from, :class:`OwnDeployment`) and its
#: Fig. 1c snapshots (round → the party's model, its reference and the previous global model).
RunModels = tuple[np.ndarray | OwnDeployment, dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class RunEvaluation:
    """A party's evaluation of one algorithm's deployed model: its held-out backtest and its Fig. 1c rows."""

    backtest: PartyBacktest
    interpolation: list[dict[str, float]]


@dataclass(frozen=True)
class EvaluationReply:
    """A party's evaluations, by algorithm, (when asked) the baselines' backtests on its universe, and its
    config digest (:func:`config_digest`)."""

    runs: dict[str, RunEvaluation]
    baselines: list[PartyBacktest] = field(default_factory=list)
    digest: str = ""

    def rows(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """The metrics rows of the algorithms' backtests and of the baselines'."""
        return [run.backtest.row for run in self.runs.values()], [b.row for b in self.baselines]

    def parties(self) -> set[int]:
        """Every party a row of the reply names (its backtests' and its Fig. 1c rows')."""
        agents, baselines = self.rows()
        return {int(row["party"]) for row in agents + baselines} | {  # type: ignore[call-overload]
            int(row["party"]) for run in self.runs.values() for row in run.interpolation}


@dataclass(frozen=True)
class MetricsReply:
    """A party's evaluation under ``evaluation.disclosure: averaged``: per algorithm only its backtest's
    scalar metrics row (:func:`portfed.experiment.party.backtests.PartyBacktest` ``row`` with the
    benchmark-relative metrics, computed on the node), the baselines' rows when asked, the held-out
    trading days and the config digest — no values, weights or Fig. 1c rows
    (:mod:`portfed.experiment.reports.disclosure`)."""

    runs: dict[str, dict[str, object]]
    baselines: list[dict[str, object]]
    days: int
    digest: str

    def rows(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        return list(self.runs.values()), list(self.baselines)

    def parties(self) -> set[int]:
        agents, baselines = self.rows()
        return {int(row["party"]) for row in agents + baselines}  # type: ignore[call-overload]


class PartyNode:
    """Party ``party`` of ``config``, with its state kept under ``state_dir`` (module docstring); ``noise``: the source
    of its local-DP noise, ``secret`` (its own key) or ``run`` (the in-process draw, :mod:`~portfed.flower.local_noise`)."""

    def __init__(self, config: FederatedConfig, party: int, state_dir: str | Path, noise: str = "secret") -> None:
        self.config = config
        self.noise = check_noise_source(noise)
        self.index = check_int(party, "party", minimum=0)
        if self.index >= config.parties.count:
            raise ValueError(f"party {party} does not exist: the config has {config.parties.count} parties")
        self.state_dir = Path(state_dir)
        self._template: tuple[Market, Party] | None = None

    @property
    def digest(self) -> str:
        return config_digest(self.config)

    @property
    def threads(self) -> int:
        """The torch threads of the party's work: ``torch_threads``, else 1 (a one-party engine's small products)."""
        return self.config.torch_threads or 1

    def _party(self) -> tuple[Market, Party]:
        """The untrained party, built on first use (its generator from the node's fit cache after the
        first fit); training works on copies of it."""
        if self._template is None:
            self._template = build_party(self.config, self.index, FitCache((self.state_dir / "fit_cache",)))
        return self._template

    def _states(self, run: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{16,64}", run):
            raise ValueError(f"a run key must be a hexadecimal fingerprint, got {run!r}")
        return self.state_dir / "runs" / run / f"party_{self.index}"

    def saved_rounds(self, run: str) -> list[int]:
        """The rounds after which this party's state of run ``run`` is on disk, ascending."""
        folder = self._states(run)
        found = [_STATE.fullmatch(p.name) for p in folder.iterdir()] if folder.is_dir() else []
        return sorted(int(m.group(1)) for m in found if m)

    @property
    def private(self) -> bool:
        """Whether this party clips and noises its own messages (``privacy.mode: local``, module docstring)."""
        return sends_private(self.config)

    def party_before(self, run: str, round_index: int) -> tuple[Party, bool]:
        """A copy of the party as it was before round ``round_index`` of run ``run`` — its newest earlier state, or
        the fresh party — and whether a state was loaded."""
        round_index = check_int(round_index, "round_index", minimum=0)
        self._states(run)  # the run key is checked before any work or any file
        party = copy.deepcopy(self._party()[1])
        earlier = [r for r in self.saved_rounds(run) if r < round_index]
        if earlier:
            party.load_state_dict(load_checkpoint(self._states(run) / f"round_{earlier[-1]:06d}.pt", run))
        return party, bool(earlier)

    def own_model(self, party: Party, trained: bool) -> np.ndarray:
        """``w_k``: the model ``party`` trained last (``trained``), else its row of the initial models ``W^0``."""
        if trained:
            engine, row = party.engine
            return engine.parameters()[row]
        initial = initial_parameters(self.config)
        return np.array(initial[self.index] if initial.ndim == 2 else initial, dtype=np.float64)

    def _trained(self, run: str, round_index: int, party: Party, params: np.ndarray, records: list[StepRecord],
                 committed: int) -> TrainReply:
        """Save ``party``'s state after round ``round_index`` and the reply carrying ``params``."""
        save_checkpoint(self._states(run) / f"round_{round_index:06d}.pt", run, party.state_dict())
        self._prune(run, committed)
        reward = float(np.mean([r.mean_log_return for r in records])) if records else float("nan")
        loss = float(np.mean([r.loss for r in records])) if records else float("nan")
        cash = float(np.mean([r.cash for r in records])) if records else float("nan")
        return TrainReply(params=np.asarray(params, dtype=np.float64), reward=reward, loss=loss, cash=cash,
                          digest=self.digest)

    def train(self, run: str, round_index: int, start: np.ndarray | None, steps: int,
              objective: LocalObjective, committed: int = 0) -> TrainReply:
        """Round ``round_index``'s Local-Solve: load the newest state before this round (none: the fresh
        party), run ``steps`` local iterations from ``start`` under ``objective``, save the state."""
        if self.private:
            raise ValueError("refused: this node's config has privacy.mode local, so it plans its own round and sends "
                             "only its noisy message; the server sent a plan instead of a reference")
        party, _ = self.party_before(run, round_index)
        result = party.local_train(start, steps, objective)
        return self._trained(run, round_index, party, result.params, list(result.records), committed)

    def own_algorithm(self, name: str) -> Algorithm:
        """The algorithm ``name`` with the node's config knobs, for a party that makes its own rounds
        (``ValueError`` when the node's config is not ``privacy.mode: local``, or the algorithm keeps the
        party's state on the server)."""
        if not self.private:
            raise ValueError("refused: the server asks this party to make its own round, but the node's config has "
                             "no privacy.mode local")
        self._algorithm_dir(name)
        spec = make_spec(self.config, name)
        if not solved_by_parties(spec):
            raise ValueError(f"refused: {name!r} keeps each party's personal state on the server; it cannot run "
                             "with privacy.mode local on Flower")
        return spec

    def train_private(self, run: str, round_index: int, algorithm: str, reference: np.ndarray, steps: int,
                      committed: int = 0) -> TrainReply:
        """Round ``round_index`` under ``privacy.mode: local`` (module docstring): ``algorithm``'s Local-Solve of the
        party's own ``w_k`` and the ``reference`` ``r_k`` (paper 003 Alg. 1 lines 15–20), ``steps`` local iterations
        to ``w_k'``, then the reply ``r_k + clip_S(w_k' − r_k) + N(0, (zS)² I)``; ``w_k'`` stays in the saved state.
        A ``w_k'`` that is not finite (training diverged) is not kept: the saved state is the party's state before
        the round, as in process, where :func:`~portfed.federation.rounds.finish_round` keeps an unusable party's
        previous model, and the reply (not finite either) is quarantined by the server."""
        spec = self.own_algorithm(algorithm)
        party, trained = self.party_before(run, round_index)
        w = self.own_model(party, trained)
        reference = np.asarray(reference, dtype=np.float64)
        if reference.shape != w.shape:
            raise ValueError(f"refused: a reference of shape {reference.shape}; the party's model has {w.shape}")
        check_request(self._states(run), round_index, request_digest(algorithm, reference, steps))
        solve = spec.local_solve(w[None], reference[None], round_index)
        objective = LocalObjective(target=None if solve.target is None else solve.target[0], sigma=solve.sigma,
                                   proximal_update=self.config.federation.proximal_update,
                                   prox_center=None if solve.prox_center is None else solve.prox_center[0],
                                   prox_coef=solve.prox_coef)
        result = party.local_train(solve.start[0], steps, objective)
        rng = message_noise(self.noise, self.state_dir, self.config.seed, run, round_index, self.index)
        message = local_message(result.params, reference, self.config.privacy_settings(), rng)  # type: ignore[arg-type]
        kept = party if np.isfinite(result.params).all() else self.party_before(run, round_index)[0]
        return self._trained(run, round_index, kept, message, list(result.records), committed)

    def own_deployed(self, algorithm: str, deployment: OwnDeployment) -> np.ndarray:
        """``algorithm.deploy(w_k, r_k, T)`` of the party's own model after run ``deployment.run``'s ``T`` rounds."""
        spec = self.own_algorithm(algorithm)
        party, trained = self.party_before(deployment.run, deployment.rounds)
        w = self.own_model(party, trained)
        if deployment.reference.shape != w.shape:
            raise ValueError(f"refused: a reference of shape {deployment.reference.shape}; the party's model has {w.shape}")
        return spec.deploy(w, deployment.reference, deployment.rounds)

    def _deployed(self, algorithm: str, deployed: np.ndarray | OwnDeployment) -> np.ndarray:
        """The model the party deploys: the server's, or under ``privacy.mode: local`` its own (:meth:`own_deployed`)."""
        if isinstance(deployed, OwnDeployment):
            return self.own_deployed(algorithm, deployed)
        if self.private:
            raise ValueError(f"refused: under privacy.mode local this node deploys its own model of {algorithm!r}; "
                             "the server sent one made from its noisy messages")
        return deployed

    def _prune(self, run: str, committed: int) -> None:
        """Delete the states older than the newest one before round ``committed`` (never asked for again)."""
        rounds = self.saved_rounds(run)
        before = [r for r in rounds if r < committed]
        for r in before[:-1]:
            (self._states(run) / f"round_{r:06d}.pt").unlink(missing_ok=True)

    @property
    def deployed_dir(self) -> Path:
        """``<state_dir>/deployed``: the party's deployed models, a run directory of its own for
        ``portfed allocate`` / ``portfed export`` (:mod:`portfed.deploy.trained`)."""
        return self.state_dir / "deployed"

    def _algorithm_dir(self, algorithm: str) -> Path:
        """``<deployed_dir>/<algorithm>`` for a registered algorithm's name (``ValueError`` otherwise: a name
        the server sent never leaves :attr:`deployed_dir`)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"refused: the server names algorithm {algorithm!r}, which is not one of "
                             f"portfed's ({', '.join(ALGORITHMS)})")
        return self.deployed_dir / algorithm

    def _keep_deployed(self, algorithm: str, deployed: np.ndarray, backtest: PartyBacktest) -> None:
        """Write the party's deployed model of ``algorithm`` and its backtest weights under :attr:`deployed_dir`."""
        folder = self._algorithm_dir(algorithm)
        atomic_write_text(self.deployed_dir / "config.yaml", dump_config(self.config))
        atomic_save(folder / f"party_{self.index}.npz",
                    lambda p: write_npz(p, deployed=np.asarray(deployed, dtype=np.float64)))
        weights = weights_frame([backtest])
        atomic_save(folder / "weights.csv", lambda p: weights.to_csv(p, index=False))

    def evaluate(self, runs: dict[str, RunModels], baselines: bool = False) -> EvaluationReply | MetricsReply:
        """For every algorithm of ``runs``: backtest its deployed model on the party's held-out period,
        compute the Fig. 1c rows of its snapshots and keep the model on the node's disk (:attr:`deployed_dir`); with ``baselines``, the config's baselines on the
        party's universe and held-out period too.  Under ``evaluation.disclosure: averaged`` the node's
        own config decides that only the scalar metrics leave it (:meth:`evaluate_metrics`)."""
        for algorithm in runs:  # every name checked before any work or any file
            self._algorithm_dir(algorithm)
        if self.config.evaluation.disclosure == "averaged":
            return self.evaluate_metrics(runs, baselines)
        market, party = self._party()
        evaluations = {}
        for algorithm, (sent, snapshots) in runs.items():
            deployed = self._deployed(algorithm, sent)
            rows = [row for t, (model, reference, previous) in sorted(snapshots.items())
                    for row in party_interpolation(self.config, party, t, model, reference, previous)]
            evaluations[algorithm] = RunEvaluation(backtest_party(self.config, market, party, deployed, algorithm), rows)
            self._keep_deployed(algorithm, deployed, evaluations[algorithm].backtest)
        return EvaluationReply(evaluations, backtest_party_baselines(self.config, market, party) if baselines else [],
                               digest=self.digest)

    def evaluate_metrics(self, runs: dict[str, RunModels], baselines: bool = False) -> MetricsReply:
        """The averaged-disclosure evaluation: every deployed model of ``runs`` backtested and kept on the
        node's disk with its ``weights.csv`` as in :meth:`evaluate` (no Fig. 1c rows: their snapshots are
        not evaluated), the baselines always (the benchmark-relative metrics and the held-out days need
        them), and only the metrics rows returned — the baselines' when asked."""
        market, party = self._party()
        agents = []
        for algorithm, (sent, _) in runs.items():
            deployed = self._deployed(algorithm, sent)
            agents.append(backtest_party(self.config, market, party, deployed, algorithm))
            self._keep_deployed(algorithm, deployed, agents[-1])
        references = backtest_party_baselines(self.config, market, party)
        metrics, values = backtest_frames(agents + references)
        evaluation = self.config.evaluation
        rows = with_relative_metrics(metrics, values, parse_benchmark(evaluation.benchmark, evaluation.baselines),
                                     evaluation.risk_free).to_dict("records")
        days = held_out_days(backtest_frames(references)[1])
        return MetricsReply(dict(zip(runs, rows[:len(agents)], strict=True)),
                            rows[len(agents):] if baselines else [], days, self.digest)
