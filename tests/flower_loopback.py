"""A Flower grid without Flower's runtime: messages are answered at once by in-process party nodes.

Lets the ServerApp's logic (handshake, rounds, evaluation, partial participation) be tested in
seconds; the real runtime is tested in ``test_flower_runtime.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from flwr.app import Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from portfed.flower.client import answer
from portfed.flower.node import PartyNode


@dataclass
class Error:
    code: int
    reason: str


@dataclass
class Metadata:
    reply_to_message_id: str
    src_node_id: int = 0


@dataclass
class Reply:
    metadata: Metadata
    content: RecordDict
    error: Error | None = None

    def has_error(self) -> bool:
        return self.error is not None


@dataclass
class LoopbackGrid:
    """``nodes``: node id → party node; ``silent``: ``(node id, message type) → count`` of messages that
    get no reply (a node that is down), ``sent``: every message type pushed, in order;
    ``crash_on_push``: the push (1-based, counting pushes of train messages) after whose delivery the
    link fails — the nodes have trained, the server never hears back (a SuperLink that dies);
    ``tamper``: ``(node id, message type) → functions``, each applied to one reply's content in turn
    (a node that answers something else than portfed's ClientApp would); ``exchanged``: every answered
    message as ``(node id, message type, message content, reply content)``, in order (what the server saw)."""

    nodes: dict[int, PartyNode]
    silent: dict[tuple[int, str], int] = field(default_factory=dict)
    crash_on_push: int | None = None
    tamper: dict[tuple[int, str], list[Callable[[RecordDict], RecordDict]]] = field(default_factory=dict)
    sent: list[tuple[int, str]] = field(default_factory=list)
    exchanged: list[tuple[int, str, RecordDict, RecordDict]] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)
    _replies: dict[str, Reply] = field(default_factory=dict)
    _train_pushes: int = 0

    def __post_init__(self) -> None:
        # A ServerApp process learns its run and node ids from the runtime; Message() needs them.
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = []
        for message in messages:
            node, kind = message.metadata.dst_node_id, message.metadata.message_type
            mid = f"m{next(self._ids)}"
            ids.append(mid)
            self.sent.append((node, kind))
            if self.silent.get((node, kind), 0) > 0:
                self.silent[node, kind] -= 1
                continue
            try:
                content = answer(self.nodes[node], kind, message.content)
                if self.tamper.get((node, kind)):
                    content = self.tamper[node, kind].pop(0)(content)
                reply = Reply(Metadata(mid), content)
                self.exchanged.append((node, kind, message.content, content))
            except Exception as error:  # a ClientApp's exception reaches the server as an error reply
                reply = Reply(Metadata(mid), RecordDict(), Error(0, repr(error)))
            self._replies[mid] = reply
        if any(m.metadata.message_type == "train" for m in messages):
            self._train_pushes += 1
            if self._train_pushes == self.crash_on_push:
                raise ConnectionError("the SuperLink is gone")
        return ids

    def pull_messages(self, message_ids: list[str]) -> list[Reply]:
        return [self._replies.pop(mid) for mid in message_ids if mid in self._replies]
