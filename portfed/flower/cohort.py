"""The federation's cohort on Flower's deployment runtime: each party is a SuperNode, reached through the grid.

:class:`FlowerCohort` implements :class:`~portfed.federation.Cohort`: ``train(plan)`` sends every
active party its own row of the plan (FedAMP's centre ``u_k`` differs per party, so every node gets
its own message, :func:`portfed.flower.wire.encode_train`), waits for the replies in a bounded poll
loop (:func:`exchange`; Flower's ``send_and_receive`` sleeps seconds between polls) and returns the
models.  A party whose node does not answer within ``reply_timeout`` seconds, answers with an
error (e.g. the SuperLink's reply for a node that stopped sending heartbeats, or the node's refusal
of a message) or with a reply that cannot be used (malformed, of another config digest, of another
model size) is a **rejected row** of the :class:`~portfed.federation.CohortResult`: the round loop
quarantines it and the round completes with the replies it got — the semantics of partial
participation — and the reason is in the run's ``quarantine.csv``.  Each party is bound to one node
for the run (:class:`NodeMap`); a restarted node with node authentication keeps its node id and rejoins.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from flwr.app import Message, RecordDict

from portfed.federation import CohortPlan, CohortResult
from portfed.flower import wire
from portfed.flower.node import TrainReply
from portfed.flower.secure import SecAggSettings, SecureRound, secure_mean
from portfed.flower.secure_metrics import TRAINING_SIZE, decode_training
from portfed.validation import check_int, check_number

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowerSettings:
    """The ServerApp's time-outs (seconds): ``poll_interval`` between two pulls of replies,
    ``reply_timeout`` for a round's (or an evaluation's) replies — also the time-to-live of its
    messages, so a node that comes back later does not train a round that is over — ``query_timeout``
    for a new node's answer to the handshake, ``join_timeout`` for every party to join at the start."""

    poll_interval: float = 0.2
    reply_timeout: float = 600.0
    query_timeout: float = 120.0
    join_timeout: float = 300.0

    def __post_init__(self) -> None:
        for name in ("poll_interval", "reply_timeout", "query_timeout", "join_timeout"):
            object.__setattr__(self, name, check_number(getattr(self, name), name, minimum=0.0, strict_min=True))


class Grid(Protocol):
    """The part of Flower's ``Grid`` the cohort uses."""

    def get_node_ids(self) -> Any: ...

    def push_messages(self, messages: Any) -> Any: ...

    def pull_messages(self, message_ids: Any) -> Any: ...


def exchange(grid: Grid, messages: Sequence[Message], timeout: float, poll: float) -> dict[int, Message]:
    """Push ``messages`` and pull their replies until all arrived or ``timeout`` seconds passed;
    ``{index in messages: reply}`` (a reply may carry an error; a missing index got none)."""
    ids = list(grid.push_messages(list(messages))) if messages else []
    pending = {mid: i for i, mid in enumerate(ids) if mid}
    replies: dict[int, Message] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            i = pending.pop(reply.metadata.reply_to_message_id, None)
            if i is not None:
                replies[i] = reply
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return replies


def failure(reply: Message | None, timeout: float) -> str:
    """Why ``reply`` cannot be used (``""`` when it can)."""
    if reply is None:
        return f"no reply within {timeout:g} s"
    if reply.has_error():
        return f"node error {reply.error.code}: {reply.error.reason}"
    return ""


class NodeMap:
    """Which SuperNode holds which party — each party bound to one node for the whole run.

    Two ways to know (docs/flower.md, "Threat model"):

    * ``known`` — the operator's map, party → node id, from the registration of every party's public
      key (with SuperNode authentication a node id stands for a registered key).  The map is final: no
      handshake, and a node outside it is **refused** — never sent a message (named once in the log).
      Every train reply still carries the node's config digest (checked by :class:`FlowerCohort`), and a
      node answers only messages for its own party (:func:`portfed.flower.client.answer`).
    * no map — a ``query`` handshake asks every new node for its party index and config digest; the
      first node that answers for a party with the server's digest is bound to it.  Any later node
      claiming a bound party is refused, as is a node of another config, one claiming a party outside
      the federation or one whose answer is malformed (:attr:`refused` keeps why).  First come, first
      bound: without registered keys nothing tells an impostor from the party, which is why
      ``portfed flower launch`` always passes the map.

    A party is never moved to another node: with node authentication a restarted SuperNode keeps its
    node id (its key's) and rejoins; without it, a restarted node is a new node and is refused.

    A query stays pending until its reply arrives or ``query_timeout`` passes (then the node is asked
    again): a node answers one message at a time, so asking a slow node again would only queue more
    work before its answer.
    """

    def __init__(self, grid: Grid, n_parties: int, digest: str, settings: FlowerSettings,
                 known: dict[int, int] | None = None) -> None:
        self.grid, self.n_parties, self.digest, self.settings = grid, n_parties, digest, settings
        known = {} if known is None else {int(k): int(n) for k, n in known.items()}
        outside = sorted(k for k in known if not 0 <= k < n_parties)
        if outside:
            raise ValueError(f"known nodes name parties {outside} outside the federation's {n_parties}")
        if known and len(known) != n_parties:
            raise ValueError(f"the node map names parties {sorted(known)}; the federation has {n_parties} "
                             f"(every party needs its registered node)")
        if len(set(known.values())) != len(known):
            raise ValueError(f"the node map gives one node to several parties: {known}")
        self.fixed = bool(known)
        self.node_of: dict[int, int] = known
        self.refused: dict[int, str] = {}  # node id → why it gets no message
        self._claims: dict[int, str] = {}  # party → why the last node claiming it was refused
        self._pending: dict[str, tuple[int, float]] = {}  # message id → (node, give up at)

    def mismatch(self, digest: str) -> str:
        """Why a node whose config digest is ``digest`` is refused (``""``: the server's own config)."""
        return "" if digest == self.digest else f"the node runs another config (digest {digest}, the server's is {self.digest})"

    def why_missing(self, party: int) -> str:
        """The reason a party without a node gets no message: ``no node``, and why its claimant was refused."""
        claim = self._claims.get(party)
        return "no node" if claim is None else f"no node ({claim})"

    def refresh(self, wait: bool = False) -> None:
        """Read the nodes the grid has (with a map: note the ones outside it; without: ask the new ones and
        read their answers); with ``wait``, until every party has its node (or ``join_timeout``).

        Raises:
            TimeoutError: ``wait`` and some party has no node in time (names them, and why their
                claimants were refused).
        """
        deadline = time.monotonic() + self.settings.join_timeout
        while True:
            if self.fixed:
                self._refuse_outsiders()
            else:
                self._ask_new_nodes()
                self._read_answers()
            missing = sorted(set(range(self.n_parties)) - set(self.node_of))
            if not wait or not missing:
                return
            if time.monotonic() >= deadline:
                why = "".join(f"; party {k}: {self._claims[k]}" for k in missing if k in self._claims)
                raise TimeoutError(f"parties {missing} did not join within {self.settings.join_timeout:g} s{why}")
            time.sleep(self.settings.poll_interval)

    def _refuse(self, node: int, reason: str) -> None:
        self.refused[node] = reason
        logger.warning("node %d refused: %s", node, reason)

    def _refuse_outsiders(self) -> None:
        mapped = set(self.node_of.values())
        for node in self.grid.get_node_ids():
            if node not in mapped and node not in self.refused:
                self._refuse(node, "not in the operator's node map (no registered key of a party)")

    def _ask_new_nodes(self) -> None:
        now = time.monotonic()
        self._pending = {mid: entry for mid, entry in self._pending.items() if entry[1] > now}
        waiting = {node for node, _ in self._pending.values()}
        done = set(self.node_of.values()) | set(self.refused)
        new = [n for n in self.grid.get_node_ids() if n not in done and n not in waiting]
        if not new:
            return
        ttl = self.settings.query_timeout
        ids = self.grid.push_messages([Message(RecordDict(), dst_node_id=n, message_type=wire.QUERY, ttl=ttl)
                                       for n in new])
        self._pending.update({mid: (node, now + ttl) for mid, node in zip(ids, new, strict=True) if mid})

    def _read_answers(self) -> None:
        if not self._pending:
            return
        for reply in self.grid.pull_messages(list(self._pending)):
            entry = self._pending.pop(reply.metadata.reply_to_message_id, None)
            if entry is None or failure(reply, 0):
                continue  # asked again next time
            self._bind(entry[0], reply.content)

    def _bind(self, node: int, content: RecordDict) -> None:
        """Bind ``node`` to the party its handshake answer claims, or refuse it (class docstring)."""
        try:
            party, digest = wire.decode_query_reply(content)
        except wire.WireError as error:
            self._refuse(node, f"malformed handshake answer: {error}")
            return
        if not 0 <= party < self.n_parties:
            self._refuse(node, f"claims party {party}; the federation has {self.n_parties}")
        elif self.mismatch(digest):
            self._claims[party] = f"node {node} refused: {self.mismatch(digest)}"
            self._refuse(node, self.mismatch(digest))
        elif party in self.node_of:
            self._refuse(node, f"claims party {party}, which is bound to node {self.node_of[party]}")
        else:
            self.node_of[party] = node


def ask_parties(grid: Grid, nodes: NodeMap, contents: dict[int, RecordDict], message_type: str,
                settings: FlowerSettings, group_id: str = "") -> tuple[dict[int, Message], dict[int, str]]:
    """Send party ``k`` the message ``contents[k]`` (after refreshing the node map), each with the
    time-to-live ``reply_timeout``; the usable replies by party and, for every other party, why not
    (``no node``, no reply in time, an error reply)."""
    nodes.refresh()
    reachable = [k for k in contents if k in nodes.node_of]
    messages = [Message(contents[k], dst_node_id=nodes.node_of[k], message_type=message_type,
                        ttl=settings.reply_timeout, group_id=group_id) for k in reachable]
    got = exchange(grid, messages, settings.reply_timeout, settings.poll_interval)
    replies, reasons = {}, {k: nodes.why_missing(k) for k in contents if k not in nodes.node_of}
    for i, k in enumerate(reachable):
        reason = failure(got.get(i), settings.reply_timeout)
        if reason:
            reasons[k] = reason
        else:
            replies[k] = got[i]
    return replies, reasons


@dataclass(frozen=True)
class PartySum:
    """A SecAgg+ round over parties (:func:`sum_parties`): the protocol's outcome, the party of each node in it,
    and why each party missing from the sum is missing (no node, a stage it failed, an unusable reply)."""

    outcome: SecureRound
    party_of: dict[int, int]
    reasons: dict[int, str]


def sum_parties(grid: Grid, nodes: NodeMap, contents: dict[int, RecordDict], round_index: int,
                secure: SecAggSettings, settings: FlowerSettings, digest_of: Callable[[RecordDict], str]) -> PartySum:
    """SecAgg+ over the nodes of the parties of ``contents`` (party → its message; after refreshing the node
    map): the training rounds' and the averaged evaluation's one protocol (:func:`~portfed.flower.secure.secure_mean`).
    ``digest_of`` reads the config digest a masked-vector reply carries (raising :class:`~portfed.flower.wire.WireError`
    when it is malformed); a reply of another config or a malformed one leaves the sum with its reason."""
    nodes.refresh()
    party_of = {nodes.node_of[k]: k for k in contents if k in nodes.node_of}
    reasons = {k: nodes.why_missing(k) for k in contents if k not in nodes.node_of}

    def screen(reply: Message) -> str:
        try:
            return nodes.mismatch(digest_of(reply.content))
        except wire.WireError as error:
            return f"malformed reply: {error}"

    outcome = secure_mean(grid, {n: contents[k] for n, k in party_of.items()}, round_index, secure,
                          settings.reply_timeout, settings.poll_interval, exchange, screen)
    return PartySum(outcome, party_of, reasons | {party_of[n]: why for n, why in outcome.reasons.items()})


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
