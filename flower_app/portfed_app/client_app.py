"""The ClientApp: one party, answering one message (:func:`portfed.flower.client.answer`).

The SuperNode's node config names the party: ``party``, ``config`` and ``state-dir``
(:func:`portfed.flower.client.node_from_config`).  A ClientApp process lives for one message; the
party's state is on the node's disk, so nothing is lost between messages or when the node restarts.
A secure round's train messages go through Flower's ``secaggplus_mod`` (:mod:`portfed.flower.secure`).
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from portfed.flower.client import answer, node_from_config
from portfed.flower.secure import secure_train_mod

app = ClientApp()


def _reply(message: Message, context: Context) -> Message:
    node = node_from_config(context.node_config)
    return Message(answer(node, message.metadata.message_type, message.content), reply_to=message)


app.query()(_reply)
app.train(mods=[secure_train_mod])(_reply)  # SecAgg+ for a secure round's messages
app.evaluate()(_reply)
