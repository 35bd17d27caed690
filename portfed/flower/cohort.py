"""The federation's cohort on Flower's deployment runtime: each party is a SuperNode, reached through the grid.

:class:`FlowerCohort` implements :class:`~portfed.federation.Cohort`: ``train(plan)`` sends every
active party its own row of the plan (FedAMP's centre ``u_k`` differs per party, so every node gets
its own message, :func:`portfed.flower.wire.encode_train`), waits for the replies in a bounded poll
loop (:func:`~portfed.flower.nodes.exchange`; Flower's ``send_and_receive`` sleeps seconds between polls) and returns the
models.  A party whose node does not answer within ``reply_timeout`` seconds, answers with an
error (e.g. the SuperLink's reply for a node that stopped sending heartbeats, or the node's refusal
of a message) or with a reply that cannot be used (malformed, of another config digest, of another
model size) is a **rejected row** of the :class:`~portfed.federation.CohortResult`: the round loop
quarantines it and the round completes with the replies it got — the semantics of partial
participation — and the reason is in the run's ``quarantine.csv``.  Each party is bound to one node
for the run (:class:`~portfed.flower.nodes.NodeMap`); a restarted node with node authentication keeps its node id and rejoins.

Every round's traffic — the bytes of the parameter arrays sent and received and the wall time —
is appended to :attr:`FlowerCohort.traffic`.

With ``secure`` settings the round runs Flower's SecAgg+ (:mod:`portfed.flower.secure`): the server
gets only the mean of the contributing parties' models, which becomes each of their rows — and with
``summed_metrics`` the mean of their training metrics, likewise (:mod:`portfed.flower.secure_metrics`).

With ``private_algorithm`` (``privacy.mode: local``) every party makes its own round of that algorithm and
sends its noisy message (:meth:`portfed.flower.node.PartyNode.train_private`): the cohort sends each the
reference ``r_k`` of the plan (:func:`portfed.flower.wire.encode_private_train`; the plan's start and target,
computed by the server from its copies, are not sent), returns the messages as the rows — under SecAgg+
their mean — and declares them private (``private_messages``), so the round loop does not noise them again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from flwr.app import RecordDict

from portfed.federation import CohortPlan, CohortResult
from portfed.flower import wire
from portfed.flower.node import TrainReply
from portfed.flower.nodes import FlowerSettings, Grid, NodeMap, ask_parties, sum_parties
from portfed.flower.secure import SecAggSettings
from portfed.flower.secure_metrics import TRAINING_SIZE, decode_training
from portfed.validation import check_int

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundTraffic:
    """One round over the wire: bytes of the arrays sent and received, wall seconds, replies missing."""

    round: int
    parties: int
    bytes_sent: int
    bytes_received: int
    seconds: float
    missing: int


class FlowerCohort:
    """N parties on SuperNodes (module docstring), models of ``n_params`` parameters; ``run`` keys their
    on-disk states, ``committed`` is the number of rounds the server's checkpoint holds
    (:meth:`checkpointed` updates it); ``private_algorithm``: the algorithm whose rounds the parties make
    themselves, sending local-DP messages (``None``: they train the server's plan); ``summed_metrics``: under
    ``secure``, the parties' training metrics ride in the masked vector after the model (``evaluation.disclosure:
    averaged``, :mod:`portfed.flower.secure_metrics`), so the server learns their mean only."""

    def __init__(self, grid: Grid, nodes: NodeMap, n_params: int, run: str, settings: FlowerSettings,
                 secure: SecAggSettings | None = None, private_algorithm: str | None = None,
                 summed_metrics: bool = False) -> None:
        self.grid, self.nodes, self.run, self.settings, self.secure = grid, nodes, run, settings, secure
        self.private_algorithm, self.summed_metrics = private_algorithm, summed_metrics
        self.n_params = check_int(n_params, "n_params", minimum=1)
        self.committed = 0
        self.traffic: list[RoundTraffic] = []

    @property
    def n_parties(self) -> int:
        return self.nodes.n_parties

    @property
    def private_messages(self) -> bool:
        """Whether the replies are the parties' local-DP messages (:func:`portfed.federation.cohort.cohort_sends_private`)."""
        return self.private_algorithm is not None

    def _encode(self, plan: CohortPlan, row: int) -> RecordDict:
        if self.private_algorithm is not None:
            return wire.encode_private_train(plan, row, self.run, self.committed, self.private_algorithm)
        return wire.encode_train(plan, row, self.run, self.committed)

    def _usable(self, content: RecordDict) -> tuple[TrainReply | None, str]:
        """A train reply's content decoded, or ``None`` and why it cannot be used: malformed, of a node
        of another config, or parameters of another size — each a rejected row, not the run's end."""
        try:
            answer = wire.decode_train_reply(content)
        except wire.WireError as error:
            return None, f"malformed reply: {error}"
        if self.nodes.mismatch(answer.digest):
            return None, self.nodes.mismatch(answer.digest)
        if answer.params.shape != (self.n_params,):
            return None, f"parameters of shape {answer.params.shape}, expected ({self.n_params},)"
        return answer, ""

    def train(self, plan: CohortPlan) -> CohortResult:
        """Every row of ``plan`` to its party's node, the replies back; missing or failed replies are
        rejected rows (NaN)."""
        if plan.optimizer_state != "keep":
            raise ValueError(f"parties on their own nodes keep their optimizer state; optimizer_state "
                             f"{plan.optimizer_state!r} needs the in-process batched engine")
        if plan.rule is not None:
            raise ValueError(f"the wire format carries the Fed+ Local-Solve only, not the local rule "
                             f"{plan.rule.kind!r} of a personalised baseline")
        started = time.perf_counter()
        parties = plan.parties.tolist()
        contents = {k: self._encode(plan, row) for row, k in enumerate(parties)}
        if self.secure is not None:
            return self._train_secure(plan, contents, started)
        replies, reasons = ask_parties(self.grid, self.nodes, contents, wire.TRAIN, self.settings,
                                       group_id=str(plan.round_index))
        d = self.n_params
        rows, rejected = [], []
        for row, k in enumerate(parties):
            answer, reason = (None, reasons[k]) if k in reasons else self._usable(replies[k].content)
            if reason:
                logger.warning("round %d: party %d: %s", plan.round_index, k, reason)
                rejected.append((row, reason))
            rows.append(answer)
        params = np.stack([a.params if a is not None else np.full(d, np.nan) for a in rows]) if rows \
            else np.empty((0, d))
        sent = sum(contents[k].array_records["plan"].count_bytes() for k in parties if k in self.nodes.node_of)
        received = sum(r.content.array_records["model"].count_bytes() for r in replies.values()
                       if "model" in r.content.array_records)
        self.traffic.append(RoundTraffic(plan.round_index, len(parties), sent, received,
                                         time.perf_counter() - started, len(rejected)))
        nan = float("nan")
        return CohortResult(params=params,
                            train_reward=np.array([a.reward if a is not None else nan for a in rows]),
                            train_loss=np.array([a.loss if a is not None else nan for a in rows]),
                            rejected=tuple(rejected),
                            train_cash=np.array([a.cash if a is not None else nan for a in rows]))

    def _summed_training(self, mean: np.ndarray, n: int, round_index: int) -> tuple[float, float, float]:
        """The mean training metrics of a secure round's ``n`` contributors from the mean of their metrics' coordinates;
        NaN, with a warning, when the sums are not what :func:`~portfed.flower.secure_metrics.encode_training` makes
        (a party sent other coordinates: the metrics are logs, so the round goes on)."""
        try:
            return decode_training(mean * n / self.secure.clipping_range)  # type: ignore[union-attr]
        except ValueError as error:
            logger.warning("round %d: the parties' summed training metrics are unusable: %s", round_index, error)
            return float("nan"), float("nan"), float("nan")

    def _train_secure(self, plan: CohortPlan, contents: dict[int, RecordDict], started: float) -> CohortResult:
        """The plan's round under SecAgg+ (:mod:`portfed.flower.secure`): every contributing party's row
        is the secure mean of their models — the server never holds a party's own — and every other row
        is rejected with the reason (no node, no reply or an error at a stage of the protocol, an unusable
        reply, the protocol halted)."""
        parties = plan.parties.tolist()

        def digest_of(content: RecordDict) -> str:
            return wire.decode_train_digest(content) if self.summed_metrics else wire.decode_train_metrics(content)[3]

        summed = sum_parties(self.grid, self.nodes, {k: contents[k] for k in parties}, plan.round_index,
                             self.secure, self.settings, digest_of)  # type: ignore[arg-type]
        outcome, party_of, reasons = summed.outcome, summed.party_of, summed.reasons
        nan, d = float("nan"), self.n_params
        size = d + (TRAINING_SIZE if self.summed_metrics else 0)
        if outcome.mean is not None and outcome.mean.shape != (size,):
            reasons |= {party_of[n]: f"secure mean of shape {outcome.mean.shape}, expected ({size},)"
                        for n in outcome.contributors}
        if self.summed_metrics:  # every contributor's row: the mean of their metrics
            metrics = {}
            if outcome.mean is not None and outcome.mean.shape == (size,):
                metrics = dict.fromkeys((party_of[n] for n in outcome.contributors),
                                        self._summed_training(outcome.mean[d:], len(outcome.contributors), plan.round_index))
        else:
            metrics = {party_of[n]: wire.decode_train_metrics(r.content)[:3] for n, r in outcome.replies.items()}
        rows, rejected = [], []
        for row, k in enumerate(parties):
            if k in reasons:
                logger.warning("round %d: party %d: %s", plan.round_index, k, reasons[k])
                rejected.append((row, reasons[k]))
            rows.append(outcome.mean[:d] if k not in reasons else np.full(d, nan))  # type: ignore[index]
        sent = sum(contents[k].array_records["plan"].count_bytes() for k in party_of.values())
        self.traffic.append(RoundTraffic(plan.round_index, len(parties), sent, outcome.bytes_received,
                                         time.perf_counter() - started, len(rejected)))
        values = [metrics.get(k, (nan, nan, nan)) for k in parties]
        return CohortResult(params=np.stack(rows) if rows else np.empty((0, d)),
                            train_reward=np.array([v[0] for v in values]), train_loss=np.array([v[1] for v in values]),
                            rejected=tuple(rejected), train_cash=np.array([v[2] for v in values]))
