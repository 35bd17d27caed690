"""The ServerApp's work: portfed's comparison with every party on its own SuperNode.

:func:`serve` is what the Flower App's ServerApp runs (:mod:`portfed_app.server_app`).  It reads the
experiment config and the run directory from the run config, maps the nodes to the parties
(:class:`~portfed.flower.nodes.NodeMap`), trains each algorithm with
:func:`portfed.experiment.runs.federated.train_parties` — the same round loop, server step, checkpoints and
sub-run files as in-process, with :class:`RemoteParties` in place of the in-process parties — then has
every party evaluate every algorithm and the baselines on its own data in one exchange
(:func:`evaluate_remotely`; a message round costs seconds) and writes the same comparison directory (:func:`portfed.experiment.reports.write_comparison`).
Besides, every sub-run gets ``flower_traffic.csv`` (per round: parties, array bytes sent and received,
wall seconds, missing replies).  ``progress.txt`` holds the last finished round of the current
algorithm, and ``done`` at the end (the launcher's progress bar reads it).

Faults of the config are injected by the server as in-process; the fault-free reruns of the
robustness table are not made on Flower (one comparison, no ``robustness.csv``).

With ``evaluation.disclosure: averaged`` (in the nodes' configs and the server's, which the config digest
makes agree) every node answers only its scalar metrics (:func:`portfed.flower.wire.decode_metrics_reply`):
the server sees each party's metrics row, publishes their mean over parties, and no node is sent Fig. 1c
snapshots.  With ``secure`` too, the evaluation is a SecAgg+ round (:func:`evaluate_securely`,
:mod:`portfed.flower.secure_metrics`): the server learns only the sums of the parties' metrics.

With ``secure`` every round is aggregated by SecAgg+ (:mod:`portfed.flower.secure`): the server learns
the mean of the parties' models only, so the checkpoint's party models and what is computed from them
(their distance to the global model in ``rounds.csv``, Fig. 1c's party model) are that mean; the
settings are kept in ``secure_aggregation.json``.

Under ``privacy.mode: local`` each party makes its own round and sends only its noisy message
(:meth:`portfed.flower.node.PartyNode.train_private`): the server's copies of the party models — the
checkpoint, ``models.npz``, the distances of ``rounds.csv``, Fig. 1c's party model — are those messages (with
SecAgg+, their mean), and at evaluation every party deploys its own model (:class:`~portfed.flower.node.OwnDeployment`;
``models.npz`` holds no ``deployed``).  Algorithms whose per-party state
lives on the server are refused before any process starts (:func:`check_private_run`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from flwr.app import RecordDict

from portfed._io import atomic_save, atomic_write_text
from portfed.agents.baselines import HINDSIGHT_BASELINES, baseline_name
from portfed.evaluation.benchmark import benchmark_label, parse_benchmark
from portfed.experiment.config import FederatedConfig, dump_config, load_config
from portfed.experiment.party import (
    INTERPOLATION_COLUMNS,
    backtest_frames,
    initial_parameters,
    load_snapshot,
    snapshot_path,
    weights_frame,
    write_npz,
)
from portfed.experiment.reports import Comparison, write_comparison
from portfed.experiment.reports.disclosure import SummedEvaluation, is_averaged, run_record
from portfed.experiment.runs import (
    TrainedRun,
    claim,
    config_fingerprint,
    directory_config_fingerprint,
    finish_run,
    make_spec,
    run_fingerprint,
    train_parties,
)
from portfed.federation.algorithms import solved_by_parties
from portfed.flower import secure_metrics, wire
from portfed.flower.cohort import FlowerCohort
from portfed.flower.node import EvaluationReply, MetricsReply, OwnDeployment, config_digest, sends_private
from portfed.flower.nodes import FlowerSettings, Grid, NodeMap, ask_parties, sum_parties
from portfed.flower.secure import SecAggSettings, check_secure
from portfed.flower.secure_metrics import EvaluationLayout

logger = logging.getLogger(__name__)
PROGRESS_FILE = "progress.txt"
SECURE_FILE = "secure_aggregation.json"
DONE = "done"


def _usable_evaluation(content: RecordDict, party: int, names: list[str], baselines: list[str],
                       nodes: NodeMap, averaged: bool = False) -> EvaluationReply | MetricsReply | str:
    """Party ``party``'s evaluate reply decoded — the metrics reply when ``averaged``
    (:func:`portfed.flower.wire.decode_metrics_reply`) — or why it cannot be used: malformed, of another
    config, of other algorithms than ``names`` or other baselines than ``baselines``, or with rows of
    another party (the strategy names a party sends become column names and table rows: only the
    expected ones pass)."""
    try:
        answer = wire.decode_metrics_reply(content) if averaged else wire.decode_evaluate_reply(content)
    except wire.WireError as error:
        return f"malformed reply: {error}"
    if nodes.mismatch(answer.digest):
        return nodes.mismatch(answer.digest)
    agents, references = answer.rows()
    strategies = [row["strategy"] for row in agents]
    if list(answer.runs) != names or strategies != names:
        return f"evaluated {list(answer.runs)} (backtests {strategies}), asked for {names}"
    if [row["strategy"] for row in references] != baselines:
        return f"baselines {[row['strategy'] for row in references]}, asked for {baselines}"
    if answer.parties() - {party}:
        return f"rows of parties {sorted(answer.parties())}, asked for party {party}"
    return answer


class RemoteParties:
    """The parties of one algorithm's run, on their SuperNodes (:class:`portfed.experiment.runs.federated.TrainingParties`).

    Their training state lives on their nodes (:class:`portfed.flower.node.PartyNode`), keyed by the
    run's fingerprint; the checkpoint holds none of it (``party_states()`` is ``None``).
    """

    def __init__(self, config: FederatedConfig, algorithm: str, grid: Grid, nodes: NodeMap,
                 settings: FlowerSettings, secure: SecAggSettings | None = None) -> None:
        self.cohort = FlowerCohort(grid, nodes, initial_parameters(config).shape[-1],
                                   run_fingerprint(config, algorithm), settings, secure,
                                   private_algorithm=algorithm if sends_private(config) else None,
                                   summed_metrics=is_averaged(config))

    def party_states(self) -> None:
        return None

    def load_party_states(self, states: list[dict[str, Any]] | None) -> None:
        if states is not None:
            raise ValueError("the checkpoint holds the parties' states of an in-process run; on Flower every "
                             "party keeps its own")

    def checkpointed(self, rounds: int) -> None:
        self.cohort.committed = rounds


Evaluation = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]


def evaluate_remotely(config: FederatedConfig, trained: dict[str, TrainedRun], grid: Grid, nodes: NodeMap,
                      settings: FlowerSettings
                      ) -> tuple[dict[str, Evaluation], tuple[pd.DataFrame, pd.DataFrame], int | None]:
    """Every party evaluates every algorithm's deployed model and the baselines on its own node, in one
    exchange: per algorithm its Fig. 1c rows, held-out metrics and portfolio values; the baselines'
    metrics and values; the held-out days when the replies are metrics replies (``evaluation.disclosure:
    averaged``: the metrics rows only, :func:`_metrics_only`), else ``None``.  Under ``privacy.mode: local``
    each party deploys its own model (:class:`OwnDeployment`), not the server's noisy copy."""
    averaged = config.evaluation.disclosure == "averaged"
    rounds = [] if averaged else sorted(config.diagnostics.interpolation_rounds)  # no Fig. 1c when averaged
    snaps = {name: {t: load_snapshot(snapshot_path(run.out, t)) for t in rounds} for name, run in trained.items()}
    contents = {k: wire.encode_evaluate({name: (_deployed(config, name, run, k), {
        t: (s["party_models"][k], s["references"][k], s["previous_global"]) for t, s in snaps[name].items()})
        for name, run in trained.items()}, baselines=True) for k in range(config.parties.count)}
    replies, reasons = ask_parties(grid, nodes, contents, wire.EVALUATE, settings)
    expected = [baseline_name(b) for b in config.evaluation.baselines]
    usable = {k: _usable_evaluation(reply.content, k, list(trained), expected, nodes, averaged)
              for k, reply in replies.items()}
    reasons |= {k: answer for k, answer in usable.items() if isinstance(answer, str)}
    if reasons:  # Table 1 is over every party; a missing backtest would read as a policy that blew up
        why = "; ".join(f"party {k}: {reason}" for k, reason in sorted(reasons.items()))
        raise RuntimeError(f"evaluate: parties without a usable evaluation ({why}); every algorithm's training "
                           "is checkpointed: fix the nodes and run again with --resume")
    answers = [answer for _, answer in sorted(usable.items()) if not isinstance(answer, str)]
    if averaged:
        return _metrics_only(list(trained), answers)  # type: ignore[arg-type]
    evaluations = {}
    for name in trained:
        rows = sorted((row for a in answers for row in a.runs[name].interpolation),  # type: ignore[union-attr]
                      key=lambda r: (r["round"], r["party"]))
        backtests = [a.runs[name].backtest for a in answers]  # type: ignore[union-attr]
        evaluations[name] = (pd.DataFrame(rows, columns=INTERPOLATION_COLUMNS), *backtest_frames(backtests),
                             weights_frame(backtests))
    return evaluations, backtest_frames([b for a in answers for b in a.baselines]), None  # type: ignore[misc]


def _deployed(config: FederatedConfig, name: str, run: TrainedRun, k: int) -> np.ndarray | OwnDeployment:
    """What party ``k`` is sent of algorithm ``name``'s deployed model: the model, or under ``privacy.mode: local``
    what it deploys its own from (:class:`OwnDeployment`)."""
    if not sends_private(config):
        return run.deployed[k]
    return OwnDeployment(run_fingerprint(config, name), run.state.round_index, run.state.references(k))


def evaluate_securely(config: FederatedConfig, trained: dict[str, TrainedRun], grid: Grid, nodes: NodeMap,
                      settings: FlowerSettings, secure: SecAggSettings) -> SummedEvaluation:
    """The averaged evaluation as one SecAgg+ round (:mod:`portfed.flower.secure_metrics`): every party backtests
    every algorithm's deployed model and the baselines on its node, and the server learns only the sums of their
    metrics; a party missing from the sum stops the comparison, as in :func:`evaluate_remotely`."""
    layout = EvaluationLayout(tuple(trained), tuple(baseline_name(b) for b in config.evaluation.baselines),
                              config.collapse.all_cash_weight)
    contents = {k: layout.mark(wire.encode_evaluate({name: (_deployed(config, name, run, k), {})
                                                     for name, run in trained.items()}, baselines=True))
                for k in range(config.parties.count)}
    summed = sum_parties(grid, nodes, contents, config.federation.rounds, secure, settings,
                         secure_metrics.reply_digest)
    outcome, reasons = summed.outcome, summed.reasons
    if reasons or outcome.mean is None:
        why = "; ".join(f"party {k}: {reason}" for k, reason in sorted(reasons.items())) or "no sum"
        raise RuntimeError(f"secure evaluate: parties missing from the sum ({why}); every algorithm's training is "
                           "checkpointed: fix the nodes and run again with --resume")
    sums = outcome.mean * len(outcome.contributors) / secure.clipping_range
    benchmark = benchmark_label(parse_benchmark(config.evaluation.benchmark, config.evaluation.baselines),
                                layout.strategies)
    hindsight = {name: name in HINDSIGHT_BASELINES for name in layout.strategies}
    return secure_metrics.decode(sums, len(outcome.contributors), layout, hindsight, benchmark)


def _metrics_only(names: list[str], answers: list[MetricsReply]
                  ) -> tuple[dict[str, Evaluation], tuple[pd.DataFrame, pd.DataFrame], int]:
    """The parties' metrics replies as evaluations without Fig. 1c rows, values or weights (what the
    averaged disclosure lets leave the parties, :mod:`portfed.experiment.reports.disclosure`), and the
    fewest held-out days any party had."""
    empty = (pd.DataFrame(columns=INTERPOLATION_COLUMNS),)
    evaluations = {name: (*empty, pd.DataFrame([a.runs[name] for a in answers]), pd.DataFrame(), weights_frame([]))
                   for name in names}
    baselines = pd.DataFrame([row for a in answers for row in a.baselines])
    return evaluations, (baselines, pd.DataFrame()), min(a.days for a in answers)


def _keep_server_copies(run: TrainedRun) -> None:
    """``models.npz`` of a run under ``privacy.mode: local`` without ``deployed``: the server holds the parties' noisy
    messages, not what they deploy (each party's deployed model is under its node's ``deployed/``), so the run
    directory offers no model for ``portfed allocate`` / ``export`` to take for a party's."""
    atomic_save(run.out / "models.npz", lambda p: write_npz(p, party_models=run.state.party_models,
                                                            global_model=run.state.global_model))


def parse_node_map(text: str) -> dict[int, int] | None:
    """The run config's ``nodes``: ``"party:node id,…"`` from the registration of the parties' keys
    (``None`` for ``""``: a handshake); ``ValueError`` naming an item that is not two integers."""
    nodes = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        party, _, node = item.partition(":")
        if not (party.isdigit() and node.isdigit()) or int(party) in nodes:
            raise ValueError(f"nodes={text!r}: {item!r} is not a new party:node-id pair of integers")
        nodes[int(party)] = int(node)
    return nodes or None


def check_secure_run(config: FederatedConfig, names: list[str]) -> None:
    """``ValueError`` (one line) when a run of ``names`` under ``config`` cannot be securely aggregated: an
    algorithm outside the mean family (:func:`portfed.flower.secure.check_secure`), fewer than two parties a
    round (or more than SecAgg+ sums: a round's, or under ``evaluation.disclosure: averaged`` every party, whose
    evaluation is one secure round), or server work on each party's message (the update-norm screen, injected
    faults)."""
    for name in names:
        check_secure(name, own_rounds=sends_private(config))
    if config.federation.screen_factor is not None:
        raise ValueError(f"secure aggregation refuses federation.screen_factor={config.federation.screen_factor}: "
                         "the norm screen needs each party's update, and the server learns only their sum")
    per_round = config.federation.parties_per_round or config.parties.count
    if not 2 <= per_round <= SecAggSettings.max_parties:
        raise ValueError(f"secure aggregation sums 2 … {SecAggSettings.max_parties} parties a round, the config has "
                         f"{per_round} (one party's model is not hidden in a sum of one; more overflow the modulus)")
    if config.parties.faults:
        raise ValueError("secure aggregation refuses parties.faults: faults are injected by the server into each "
                         "party's message, and the server learns only their sum")
    if is_averaged(config) and config.parties.count > SecAggSettings.max_parties:
        raise ValueError(f"secure aggregation with evaluation.disclosure averaged sums every party's evaluation in one "
                         f"round: at most {SecAggSettings.max_parties} parties, the config has {config.parties.count}")


#: The largest chance that the noise alone puts a coordinate of a message outside SecAgg+'s clipping range.
OUT_OF_RANGE = 0.01


def check_private_run(config: FederatedConfig, names: list[str], secure: SecAggSettings | None = None) -> None:
    """``ValueError`` (one line) when ``privacy.mode: local`` cannot run ``names`` on Flower: an algorithm whose
    per-party state lives on the server (the personalised baselines' personal models, SCAFFOLD's control
    variates), made from each party's own model, which a party under local DP never sends; with ``secure``,
    noise so large against the clipping range ``c`` that a message of ``d`` coordinates, each ``N(0, (zS)²)``,
    has a coordinate outside ``[−c, c]`` with a chance above :data:`OUT_OF_RANGE`: ``1 − (1 − erfc(c / (zS√2)))^d``
    for noise alone, a lower bound (a coordinate's reference and update only move it further out) — the node would
    refuse to send it."""
    if not sends_private(config):
        return
    for name in names:
        if not solved_by_parties(make_spec(config, name)):
            raise ValueError(f"privacy.mode local on Flower refuses {name!r}: its personal models live on the server, "
                             "made from each party's own model, which a party under local DP never sends")
    privacy = config.privacy_settings()
    if secure is None or privacy is None or not privacy.noisy:
        return
    std, d = privacy.noise_multiplier * privacy.clip, initial_parameters(config).shape[-1]
    chance = -math.expm1(d * math.log1p(-math.erfc(secure.clipping_range / (std * math.sqrt(2)))))
    if chance > OUT_OF_RANGE:
        raise ValueError(f"secure aggregation with privacy.mode local: the noise std z·S = {std:g} puts one of the "
                         f"{d} coordinates outside the clipping range ±{secure.clipping_range:g} with a chance of "
                         f"{chance:.2g} per message (the node would refuse it); raise --secagg-clipping-range")


def _record_secure(out: Path, secure: SecAggSettings | None, resume: bool) -> None:
    """``<out>/secure_aggregation.json``: the run's SecAgg+ settings (``null``: plain); a resume with other
    settings is refused (its rounds would mix two aggregations)."""
    path, text = out / SECURE_FILE, json.dumps(None if secure is None else asdict(secure))
    if resume and path.exists() and path.read_text() != text:
        raise ValueError(f"{out} was trained with secure aggregation {path.read_text()}; resuming it with {text} "
                         "would mix two aggregations")
    atomic_write_text(path, text)


def serve(grid: Grid, config_path: str, out_dir: str, algorithms: list[str] | None = None, resume: bool = False,
          settings: FlowerSettings | None = None, nodes: dict[int, int] | None = None,
          secure: SecAggSettings | None = None) -> Comparison:
    """Run the comparison of ``config_path`` (``algorithms``: default the config's) on the grid's nodes
    into ``out_dir`` (module docstring); ``resume`` continues every algorithm from its checkpoint;
    ``nodes`` (party → node id, known from the keys' registration) spares the handshake; ``secure``
    aggregates every round with SecAgg+ (:mod:`portfed.flower.secure`; the mean family only).  ``out_dir`` is
    locked and recorded as an in-process comparison's (:func:`portfed.experiment.runs.run_dir.claim`)."""
    settings = FlowerSettings() if settings is None else settings
    config = load_config(config_path)
    if not isinstance(config, FederatedConfig):
        raise ValueError(f"{config_path} is a {config.experiment!r} config; Flower runs federated ones")
    names = list(config.federation.algorithms if not algorithms else algorithms)
    for name in names:
        make_spec(config, name)
    if secure is not None:
        check_secure_run(config, names)
    check_private_run(config, names, secure)
    federation = config.federation.model_copy(update={"algorithms": names})
    config = config.model_copy(update={"federation": federation})
    out = Path(out_dir)
    with claim(out, "comparison", config_fingerprint(config), legacy_fingerprint=directory_config_fingerprint(out),
               algorithms=names, **run_record(config)):
        _record_secure(out, secure, resume)
        atomic_write_text(out / "config.yaml", dump_config(config))
        node_map = NodeMap(grid, config.parties.count, config_digest(config), settings, nodes)
        node_map.refresh(wait=True)
        logger.info("every party joined: %s", node_map.node_of)
        trained: dict[str, TrainedRun] = {}
        for name in names:
            members = RemoteParties(config, name, grid, node_map, settings, secure)

            def report(t: int, name: str = name) -> None:
                atomic_write_text(out / PROGRESS_FILE, f"{name} {t + 1} {config.federation.rounds}\n")

            trained[name] = train_parties(config, name, members, out / name, resume=resume, progress=False,
                                          on_round=report)
            if sends_private(config):
                _keep_server_copies(trained[name])
            traffic = pd.DataFrame([asdict(r) for r in members.cohort.traffic])
            atomic_save(out / name / "flower_traffic.csv", lambda p, f=traffic: f.to_csv(p, index=False))
        summed = None
        if secure is not None and is_averaged(config):
            summed = evaluate_securely(config, trained, grid, node_map, settings, secure)
            evaluations = {name: (pd.DataFrame(columns=INTERPOLATION_COLUMNS), pd.DataFrame(), pd.DataFrame(),
                                  weights_frame([])) for name in names}
            baselines, days = (pd.DataFrame(), pd.DataFrame()), summed.days
        else:
            evaluations, baselines, days = evaluate_remotely(config, trained, grid, node_map, settings)
        runs = {name: finish_run(config, trained[name], evaluations[name]) for name in names}
        result = write_comparison(config, out, runs, *baselines, days=days, summed=summed)
        atomic_write_text(out / PROGRESS_FILE, f"{DONE}\n")
        return result
