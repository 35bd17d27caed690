"""The federation's cohort on Flower's deployment runtime: each party is a SuperNode, reached through the grid.

:class:`FlowerCohort` implements :class:`~portfed.federation.Cohort`: ``train(plan)`` sends every
active party its own row of the plan (FedAMP's centre ``u_k`` differs per party, so every node gets
its own message, :func:`portfed.flower.wire.encode_train`), waits for the replies in a bounded poll
loop (:func:`exchange`; Flower's ``send_and_receive`` sleeps seconds between polls) and returns the
models.  A party whose node does not answer within ``reply_timeout`` seconds, or answers with an
error (e.g. the SuperLink's reply for a node that stopped sending heartbeats), is a **rejected row**
of the :class:`~portfed.federation.CohortResult`: the round loop quarantines it and the round
completes with the replies it got — the semantics of partial participation — and the reason is in
the run's ``quarantine.csv``.  Before every round the node map is refreshed (:class:`NodeMap`), so a
restarted node (a new node id without node authentication, the same one with it) rejoins.

Every round's traffic — the bytes of the parameter arrays sent and received and the wall time —
is appended to :attr:`FlowerCohort.traffic`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from flwr.app import Message, RecordDict

from portfed.federation import CohortPlan, CohortResult
from portfed.flower import wire
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
    """Which SuperNode holds which party: asked of every node by a ``query`` handshake (node ids are
    the runtime's; the party index and config digest are the node's answer), or ``known`` beforehand —
    with SuperNode authentication the operator registers party k's key and gets its node id, so no
    handshake is needed (every train reply still carries the node's config digest, checked by
    :class:`FlowerCohort`).

    A query stays pending until its reply arrives or ``query_timeout`` passes (then the node is asked
    again): a node answers one message at a time, so asking a slow node again would only queue more
    work before its answer.
    """

    def __init__(self, grid: Grid, n_parties: int, digest: str, settings: FlowerSettings,
                 known: dict[int, int] | None = None) -> None:
        self.grid, self.n_parties, self.digest, self.settings = grid, n_parties, digest, settings
        known = {} if known is None else dict(known)
        outside = sorted(k for k in known if not 0 <= k < n_parties)
        if outside:
            raise ValueError(f"known nodes name parties {outside} outside the federation's {n_parties}")
        self.node_of: dict[int, int] = known
        self._answered: set[int] = set(known.values())
        self._pending: dict[str, tuple[int, float]] = {}  # message id → (node, give up at)

    def refresh(self, wait: bool = False) -> None:
        """Ask the nodes not asked yet and read the answers that arrived; with ``wait``, until every party
        has answered (or ``join_timeout``).

        Raises:
            ValueError: a node's config differs from the server's, or it claims a party outside the
                federation.
            TimeoutError: ``wait`` and some party did not join in time (names them).
        """
        deadline = time.monotonic() + self.settings.join_timeout
        while True:
            self._ask_new_nodes()
            self._read_answers()
            missing = sorted(set(range(self.n_parties)) - set(self.node_of))
            if not wait or not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"parties {missing} did not join within {self.settings.join_timeout:g} s")
            time.sleep(self.settings.poll_interval)

    def _ask_new_nodes(self) -> None:
        now = time.monotonic()
        self._pending = {mid: entry for mid, entry in self._pending.items() if entry[1] > now}
        waiting = {node for node, _ in self._pending.values()}
        new = [n for n in self.grid.get_node_ids() if n not in self._answered and n not in waiting]
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
            node = entry[0]
            self._answered.add(node)
            party, digest = wire.decode_query_reply(reply.content)
            if digest != self.digest:
                raise ValueError(f"the node of party {party} runs another config (digest {digest}, "
                                 f"the server's is {self.digest})")
            if not 0 <= party < self.n_parties:
                raise ValueError(f"node {node} claims party {party}; the federation has {self.n_parties}")
            previous = self.node_of.get(party)
            if previous is not None and previous != node:
                logger.warning("party %d moves from node %d to node %d (a restarted node)", party, previous, node)
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
    replies, reasons = {}, {k: "no node" for k in contents if k not in nodes.node_of}
    for i, k in enumerate(reachable):
        reason = failure(got.get(i), settings.reply_timeout)
        if reason:
            reasons[k] = reason
        else:
            replies[k] = got[i]
    return replies, reasons


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
    (:meth:`checkpointed` updates it)."""

    def __init__(self, grid: Grid, nodes: NodeMap, n_params: int, run: str, settings: FlowerSettings) -> None:
        self.grid, self.nodes, self.run, self.settings = grid, nodes, run, settings
        self.n_params = check_int(n_params, "n_params", minimum=1)
        self.committed = 0
        self.traffic: list[RoundTraffic] = []

    @property
    def n_parties(self) -> int:
        return self.nodes.n_parties

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
        contents = {k: wire.encode_train(plan, row, self.run, self.committed) for row, k in enumerate(parties)}
        replies, reasons = ask_parties(self.grid, self.nodes, contents, wire.TRAIN, self.settings,
                                       group_id=str(plan.round_index))
        d = self.n_params
        rows, rejected = [], []
        for row, k in enumerate(parties):
            reason = reasons.get(k, "")
            answer = None if reason else wire.decode_train_reply(replies[k].content)
            if answer is not None and answer.digest != self.nodes.digest:
                raise ValueError(f"the node of party {k} runs another config (digest {answer.digest}, the "
                                 f"server's is {self.nodes.digest})")
            if answer is not None and answer.params.shape != (d,):
                reason, answer = f"parameters of shape {answer.params.shape}, expected ({d},)", None
            if reason:
                logger.warning("round %d: party %d: %s", plan.round_index, k, reason)
                rejected.append((row, reason))
            rows.append(answer)
        params = np.stack([a.params if a is not None else np.full(d, np.nan) for a in rows]) if rows \
            else np.empty((0, d))
        sent = sum(contents[k].array_records["plan"].count_bytes() for k in parties if reasons.get(k) != "no node")
        received = sum(replies[k].content.array_records["model"].count_bytes() for k in replies)
        self.traffic.append(RoundTraffic(plan.round_index, len(parties), sent, received,
                                         time.perf_counter() - started, len(rejected)))
        nan = float("nan")
        return CohortResult(params=params,
                            train_reward=np.array([a.reward if a is not None else nan for a in rows]),
                            train_loss=np.array([a.loss if a is not None else nan for a in rows]),
                            rejected=tuple(rejected),
                            train_cash=np.array([a.cash if a is not None else nan for a in rows]))
