"""Running and resuming one algorithm of the federated portfolio experiment (paper 000 §8.2).

The parties come from :mod:`portfed.experiment.party.build`.  ``rounds`` rounds of ``local_steps``
local iterations run through :func:`portfed.federation.run_rounds` on a
:class:`~portfed.experiment.party.group.PartyGroup` (the parties' agents are rows of one training
engine; each party's Augmenter still decides its regenerations and hands its panel to its row): the
federation layer sees parameter vectors and one ``cohort.train(plan)`` call per round.  Every ``checkpoint_every`` rounds (and after the last) the
federation state, every party's state and the records so far are saved atomically; a resumed run
continues from the last checkpoint bit for bit.

**Deployed model.**  After the last round every party deploys
:func:`portfed.federation.deployed_models`: ``ŵ_k = (1 − λ_T) w_k + λ_T r_k``, the model it would
start its next local training from once the server's last message has reached it (paper 003 Alg. 1
line 18).  Its backtest on the held-out period is :mod:`portfed.experiment.party.backtests`; the
diagnostics (learning curves, Fig. 1c) are :mod:`portfed.experiment.party.diagnostics`.

Outputs of a sub-run directory: ``rounds.csv`` (one row per round and party: training reward, mean and
std of ``|Δ parameters|`` across the aggregation step, change over the round, distance to the global
model, the server's iterations and convergence), ``learning_curve.csv`` (party averages per round),
``snapshots/round_XXXX.npz``, ``interpolation.csv``, ``models.npz``, ``party_metrics.csv``,
``portfolio_values.csv``, ``tensorboard/`` (with ``tracking.tensorboard``: :mod:`portfed.experiment.runs.tracking`),
``weights.csv`` (the weights each party's deployed model held on every
held-out day, with its turnover and cost: :func:`portfed.experiment.party.backtests.weights_frame`), ``quarantine.csv`` (every message the server excluded: round, party, the
fault injected if any, the reason), ``checkpoint.pt`` and ``run.json`` (:mod:`portfed.experiment.runs.run_dir`:
``running`` from the start of the rounds, ``finished`` once every file above is written, or ``failed`` /
``interrupted``; :func:`portfed.deploy.load_trained_party` deploys finished sub-runs only; with the
``backend`` its parties trained on in this process, logged too: :mod:`portfed.agents.backend`).  With
``evaluation.disclosure: averaged`` the per-party evaluation files (``interpolation.csv``,
``party_metrics.csv``, ``portfolio_values.csv``, ``weights.csv``) are not written
(:mod:`portfed.experiment.reports.disclosure`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from portfed._crash import crash_point
from portfed._io import atomic_save
from portfed.agents.batched import resolved_backend
from portfed.agents.learner import network_parts
from portfed.experiment.config import FederatedConfig, portfolio_algorithm
from portfed.experiment.party import (
    Federation,
    Party,
    PartyGroup,
    backtest_agents,
    initial_parameters,
    interpolation_curves,
    learning_curve,
    save_snapshot,
    snapshot_path,
    write_npz,
)
from portfed.experiment.runs.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from portfed.experiment.runs.run_dir import (
    config_fingerprint,
    end_record,
    read_record,
    status_of,
    write_record,
)
from portfed.experiment.runs.tracking import RoundBoard
from portfed.federation import Algorithm, Cohort, FederationState, RoundRecord, deployed_models, run_rounds
from portfed.privacy import PartyPrivacy
from portfed.privacy.report import PrivacyLedger

logger = logging.getLogger(__name__)


@dataclass
class AlgorithmRun:
    """What one algorithm's sub-run produced (also written to its directory; ``state``, the federation's
    final state, is the last checkpoint's)."""

    algorithm: str
    rounds: pd.DataFrame
    curve: pd.DataFrame
    interpolation: pd.DataFrame
    party_metrics: pd.DataFrame
    values: pd.DataFrame
    deployed: np.ndarray
    quarantine: pd.DataFrame
    weights: pd.DataFrame
    state: FederationState


def make_spec(config: FederatedConfig, algorithm: str) -> Algorithm:
    """The algorithm ``algorithm`` with the config's knobs, for portfolio parties (:func:`portfolio_algorithm`);
    ``ValueError`` (one line) when the config's ``privacy`` mode cannot protect it (:class:`PartyPrivacy`)."""
    spec = portfolio_algorithm(algorithm, config.federation.algorithm_params.get(algorithm, {}))
    if config.privacy is not None:
        PartyPrivacy(config.privacy_settings()).check(  # type: ignore[arg-type]
            spec, screened=config.federation.screen_factor is not None,
            shared_optimizer=config.federation.optimizer_state == "average")
    return spec


def run_fingerprint(config: FederatedConfig, algorithm: str, start: FederationState | None = None) -> str:
    """A hash of everything the rounds of ``algorithm`` depend on (``rounds`` itself may grow on resume),
    including the state they start from when it is not the initial models (``start``, :func:`train_parties`)."""
    fed = config.federation
    key = {
        "algorithm": algorithm,
        "params": fed.algorithm_params.get(algorithm, {}),
        "local_steps": fed.local_steps,
        "parties_per_round": fed.parties_per_round,
        "screen_factor": fed.screen_factor,
        # One engine since the per-party one was retired; the key keeps the fingerprints (and so the
        # checkpoints) of runs made by the batched engine valid, and refuses per-party checkpoints.
        "engine": "batched",
        **({} if fed.optimizer_state == "keep" else {"optimizer_state": fed.optimizer_state}),
        **({} if fed.initial_models == "shared" else {"initial_models": fed.initial_models}),
        **({} if fed.proximal_update == "mix" else {"proximal_update": fed.proximal_update}),
        **({} if fed.share == "actor_critic" else {"share": fed.share}),
        **config.model_dump(mode="json", include={"seed", "data", "parties", "agent"}),
        # with the resolved z: a run calibrated to target_epsilon over T rounds is not resumed for more rounds
        **({} if config.privacy is None else {"privacy": {**config.privacy.model_dump(mode="json"),
                                                          "z": config.privacy_settings().noise_multiplier}}),
        **({} if start is None else {"start": state_digest(start)}),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def state_digest(state: FederationState) -> str:
    """A hash of ``state``: its algorithm, seed, round and every array it holds."""
    digest = hashlib.sha256(json.dumps([state.algorithm, state.seed, state.round_index]).encode())
    arrays = {"global_model": state.global_model, "party_models": state.party_models, **state.extras,
              **({} if state.centers is None else {"centers": state.centers})}
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(arrays[name], dtype=np.float64).tobytes())
    return digest.hexdigest()


class TrainingParties(Protocol):
    """Where one algorithm's parties live, as the training loop sees them: in this process
    (:class:`InProcessParties`) or on their own machines (:class:`portfed.flower.server.RemoteParties`).

    ``cohort`` trains the rounds; ``party_states()`` is what the checkpoint stores of the parties
    (``None`` when they keep their own state, on their machines) and ``load_party_states`` restores it;
    ``checkpointed(r)`` tells them the run's checkpoint now holds ``r`` rounds.
    """

    @property
    def cohort(self) -> Cohort | Sequence[Party]: ...

    def party_states(self) -> list[dict[str, Any]] | None: ...

    def load_party_states(self, states: list[dict[str, Any]] | None) -> None: ...

    def checkpointed(self, rounds: int) -> None: ...


class InProcessParties:
    """``parties`` trained in this process, in the rows of one engine (:class:`PartyGroup`)."""

    def __init__(self, parties: Sequence[Party]) -> None:
        self.parties = list(parties)
        # The parties train in the rows of one engine (attached here on their first run).
        self.cohort: Cohort = PartyGroup(self.parties)

    def party_states(self) -> list[dict[str, Any]]:
        return [p.state_dict() for p in self.parties]

    def load_party_states(self, states: list[dict[str, Any]] | None) -> None:
        if states is None or len(states) != len(self.parties):
            raise CheckpointError(f"the checkpoint holds no state for the {len(self.parties)} parties of this run")
        for party, party_state in zip(self.parties, states, strict=True):
            party.load_state_dict(party_state)

    def checkpointed(self, rounds: int) -> None:
        """Nothing to do: the checkpoint holds the parties' states."""


def run_algorithm(
    config: FederatedConfig,
    algorithm: str,
    federation: Federation,
    out_dir: str | Path,
    *,
    parties: Sequence[Party] | None = None,
    resume: bool = False,
    progress: bool = True,
    on_round: Callable[[int], None] | None = None,
    start: FederationState | None = None,
) -> AlgorithmRun:
    """Train ``parties`` (default ``federation.parties``; fresh from ``start``, or resumed from ``out_dir``'s
    checkpoint) with ``algorithm`` in this process (:func:`train_parties`), then evaluate them — Fig. 1c's
    rows from the snapshots, the backtests of their deployed models on ``federation``'s market — and
    write it all into the sub-run directory (:func:`finish_run`).  A failed or interrupted evaluation
    leaves ``run.json`` saying so."""
    members = InProcessParties(federation.parties if parties is None else parties)
    trained = train_parties(config, algorithm, members, out_dir, resume=resume, progress=progress, on_round=on_round,
                            start=start, backend=resolved_backend(config.agent_config()))
    try:
        crash_point("evaluation")
        interpolation = interpolation_curves(config, members.parties, trained.out, progress)
        evaluation = (interpolation, *backtest_agents(config, federation, members.parties, trained.deployed,
                                                      algorithm, progress))
    except BaseException as exc:
        end_record(trained.out, status_of(exc))
        raise
    return finish_run(config, trained, evaluation)


def _log_backend(algorithm: str, backend: str, earlier: dict[str, Any] | None) -> None:
    """Log the backend ``algorithm`` trains on; warn when the run it resumes (``earlier``, its ``run.json``)
    recorded another."""
    logger.info("%s: training on the %s backend", algorithm, backend)
    before = None if earlier is None else earlier.get("backend")
    if before is not None and before != backend:
        logger.warning("%s: resuming on the %s backend a run trained on the %s backend so far: the rounds from "
                       "here agree with an uninterrupted run to float32 round-off, not bit for bit "
                       "(agent.backend, PORTFED_NATIVE)", algorithm, backend, before)


@dataclass
class TrainedRun:
    """An algorithm's rounds, done: its sub-run directory, final state, deployed models and round records."""

    algorithm: str
    out: Path
    state: FederationState
    deployed: np.ndarray
    rows: list[dict[str, object]]


def check_resumable(config: FederatedConfig, algorithm: str, out_dir: str | Path,
                    start: FederationState | None = None) -> None:
    """Refuse a resume of ``algorithm`` in ``out_dir`` from a checkpoint of another run (reads only).

    Raises:
        CheckpointError: the sub-run's checkpoint is unreadable or of another config or algorithm.
    """
    checkpoint = Path(out_dir) / CHECKPOINT_NAME
    if checkpoint.exists():
        load_checkpoint(checkpoint, run_fingerprint(config, algorithm, start))


def train_parties(
    config: FederatedConfig,
    algorithm: str,
    members: TrainingParties,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    on_round: Callable[[int], None] | None = None,
    start: FederationState | None = None,
    backend: str | None = None,
) -> TrainedRun:
    """Train ``members`` with ``algorithm`` (fresh, or resumed from ``out_dir``'s checkpoint); writes the
    checkpoints, snapshots and ``models.npz`` of the sub-run directory (module docstring).

    A fresh run starts from ``start`` (a copy of it is trained; ``start`` itself is not changed), e.g.
    :meth:`FederationState.restarted` of an earlier run's final state — walk-forward's ``continue``
    mode — or, by default, from :meth:`FederationState.initial` on :func:`initial_parameters`.  The
    parties' own training state (network, Adam moments, PVM, sampler) is theirs: ``start`` sets the
    models their rounds start from, as the server's state does in every round.  ``start`` is part of
    the checkpoint's fingerprint, so a run is resumed only with the state it was started from.
    ``on_round(t)`` is called after every round (progress reports of parallel sweeps).  ``backend``: the
    backend the parties train on (:mod:`portfed.agents.backend`), logged and recorded in ``run.json``; a
    resumed run trained on another one before is warned about (the two agree to float32 round-off only).
    Without ``resume`` a previous checkpoint in ``out_dir`` is deleted first, so a fresh run that is
    interrupted can never be resumed from a stale one.  With ``resume`` and no checkpoint the run
    starts at round 0.

    Raises:
        CheckpointError: the checkpoint belongs to another config or algorithm.
    """
    spec = make_spec(config, algorithm)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fed = config.federation
    checkpoint, fingerprint = out / CHECKPOINT_NAME, run_fingerprint(config, algorithm, start)
    rows: list[dict[str, object]] = []
    saved = load_checkpoint(checkpoint, fingerprint) if resume and checkpoint.exists() else None
    if backend is not None:
        _log_backend(algorithm, backend, read_record(out) if saved is not None else None)
    write_record(out, "algorithm", fingerprint, resumed=saved is not None, algorithm=algorithm,
                 config=config_fingerprint(config), rounds=fed.rounds, **({} if backend is None else {"backend": backend}))
    if saved is not None:
        state = FederationState.from_state_dict(saved["federation"])
        members.load_party_states(saved["parties"])
        rows = list(saved["rows"])
        logger.info("%s: resuming after round %d", algorithm, state.round_index)
    else:
        if resume:
            logger.info("%s: no checkpoint in %s, starting at round 0", algorithm, out)
        checkpoint.unlink(missing_ok=True)
        if start is None:
            state = FederationState.initial(spec, initial_parameters(config), config.parties.count, config.seed)
        else:
            state = FederationState.from_state_dict(start.state_dict())

    previous_global = state.global_model.copy()
    board = RoundBoard(out, state.round_index) if config.tracking.tensorboard else None
    privacy = config.privacy_settings()
    ledger = None if privacy is None else PrivacyLedger(privacy, config.sampling(), rows)

    def after_round(t: int, current: FederationState, record: RoundRecord) -> None:
        nonlocal previous_global
        rows.extend(record.rows() if ledger is None else ledger.add(record.rows()))
        if board is not None:
            board.log(record)
        if t in config.diagnostics.interpolation_rounds:
            save_snapshot(snapshot_path(out, t), current.party_models, current.references(), previous_global)
        previous_global = current.global_model.copy()
        if (t + 1) % fed.checkpoint_every == 0 or t + 1 == fed.rounds:
            save_checkpoint(checkpoint, fingerprint, {"federation": current.state_dict(),
                                                      "parties": members.party_states(), "rows": rows})
            members.checkpointed(t + 1)
        if on_round is not None:
            on_round(t)

    options = {"k_per_round": fed.parties_per_round, "seed": config.seed, "init_params": state.party_models,
               "callback": after_round, "progress": progress, "state": state,
               "faults": [f.fault() for f in config.parties.faults], "screen_factor": fed.screen_factor,
               "optimizer_state": fed.optimizer_state, "proximal_update": fed.proximal_update,
               "parts": network_parts(config.agent_config()),
               "privacy": None if privacy is None else PartyPrivacy(privacy)}
    try:
        final = run_rounds(members.cohort, spec, fed.rounds, fed.local_steps, **options).state
    except BaseException as exc:
        end_record(out, status_of(exc))
        raise
    finally:
        if board is not None:
            board.close()
    deployed = deployed_models(spec, final)
    atomic_save(out / "models.npz", lambda p: write_npz(p, party_models=final.party_models,
                                                        global_model=final.global_model, deployed=deployed))
    return TrainedRun(algorithm, out, final, deployed, rows)


def finish_run(config: FederatedConfig, trained: TrainedRun,
               evaluation: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> AlgorithmRun:
    """The records and the parties' ``evaluation`` (Fig. 1c rows, held-out metrics, portfolio values and
    weights held) of a trained run, written into its sub-run directory — the evaluation's files only with
    ``evaluation.disclosure: per_party`` (averaged: they stay in memory for the comparison's means,
    :mod:`portfed.experiment.reports.disclosure`)."""
    interpolation, metrics, values, weights = evaluation
    rounds = pd.DataFrame(trained.rows)
    quarantine = rounds.loc[rounds["quarantined"] != "", ["round", "party", "fault", "quarantined"]]
    curve = learning_curve(rounds)
    files = [("rounds", rounds, False), ("learning_curve", curve, False), ("quarantine", quarantine, False)]
    if config.evaluation.disclosure == "per_party":
        files += [("interpolation", interpolation, False), ("party_metrics", metrics, False),
                  ("portfolio_values", values, True), ("weights", weights, False)]
    for name, frame, index in files:
        atomic_save(trained.out / f"{name}.csv", lambda p, f=frame, i=index: f.to_csv(p, index=i))
    end_record(trained.out, "finished")
    return AlgorithmRun(trained.algorithm, rounds, curve, interpolation, metrics, values, trained.deployed, quarantine,
                        weights, trained.state)
