"""How the ServerApp reaches the parties: its time-outs (:class:`FlowerSettings`), the part of Flower's grid it
uses (:class:`Grid`), one bounded exchange of messages (:func:`exchange`: Flower's ``send_and_receive`` sleeps
seconds between polls), which SuperNode holds which party (:class:`NodeMap`), and the two ways of asking the
parties — each for its own reply (:func:`ask_parties`), or all of them for one SecAgg+ sum (:func:`sum_parties`,
:mod:`portfed.flower.secure`).  The training rounds (:class:`portfed.flower.cohort.FlowerCohort`) and the
evaluation (:mod:`portfed.flower.server`) are built on them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flwr.app import Message, RecordDict

from portfed.flower import wire
from portfed.flower.secure import SecAggSettings, SecureRound, secure_mean
from portfed.validation import check_number

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
