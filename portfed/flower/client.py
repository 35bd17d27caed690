"""The ClientApp's work: one message of the server, answered by the party of this node.

:func:`answer` decodes the message by its type (:mod:`portfed.flower.wire`), calls the
:class:`~portfed.flower.node.PartyNode` and encodes the reply — for a secure round's train message as
Flower's ``FitRes``, which ``secaggplus_mod`` masks (:mod:`portfed.flower.secure`; under ``privacy.mode: local`` the
node's noisy message is what is masked; under ``evaluation.disclosure: averaged`` its training metrics follow the
model in the masked vector instead of travelling in clear); a train message that requests a secure evaluation is
answered with the party's metrics as one vector to mask (:mod:`portfed.flower.secure_metrics`).  A train message is read as a plan or, when the node's own config has
``privacy.mode: local``, as a reference for the party's own round.  :func:`node_from_config` builds the
node's party from the SuperNode's node config: ``party`` (its index), ``config`` (the path of the
node's copy of the experiment config), ``state-dir`` (where its state and fitted generator are
kept; default ``~/.portfed/node``) and ``dp-noise`` (the seed of its local-DP noise: ``secret``, the
default, or ``run``, :mod:`portfed.flower.local_noise`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from flwr.app import RecordDict

from portfed._threads import torch_threads
from portfed.experiment.config import FederatedConfig, load_config
from portfed.experiment.reports.disclosure import is_averaged
from portfed.flower import secure, secure_metrics, wire
from portfed.flower.node import MetricsReply, PartyNode, TrainReply

DEFAULT_STATE_DIR = "~/.portfed/node"


def node_from_config(node_config: Mapping[str, object]) -> PartyNode:
    """The party named by a SuperNode's node config (``ValueError`` naming a missing or bad key)."""
    for key in ("party", "config"):
        if key not in node_config:
            raise ValueError(f"the SuperNode's node config has no {key!r} (start it with "
                             "`portfed flower supernode --party K --config CONFIG`)")
    config = load_config(str(node_config["config"]))
    if not isinstance(config, FederatedConfig):
        raise ValueError(f"{node_config['config']} is a {config.experiment!r} config, not a federated one")
    state_dir = Path(str(node_config.get("state-dir", DEFAULT_STATE_DIR))).expanduser()
    return PartyNode(config, int(str(node_config["party"])), state_dir, str(node_config.get("dp-noise", "secret")))


def answer(node: PartyNode, message_type: str, content: RecordDict) -> RecordDict:
    """The reply content to a message of ``message_type`` (``ValueError`` for an unknown type), computed
    with the party's torch threads."""
    with torch_threads(node.threads):
        return _answer(node, message_type, content)


def _answer(node: PartyNode, message_type: str, content: RecordDict) -> RecordDict:
    if message_type == wire.QUERY:
        return wire.encode_query_reply(node.index, node.digest)
    if message_type == wire.TRAIN:
        layout = secure_metrics.requested(content)
        if layout is not None:
            return _evaluate_secure(node, content, layout)
        scalars, reply = _train(node, content)
        clipping_range = secure.secure_clipping_range(content)
        if clipping_range is None:
            return wire.encode_train_reply(reply)
        secure.check_range(reply.params, clipping_range)
        seed = secure.rounding_seed(str(scalars["run"]), int(scalars["round"]), node.index)  # type: ignore[call-overload]
        if not is_averaged(node.config):
            return secure.secure_train_reply(reply.params, wire.encode_train_reply(reply), seed)
        metrics = clipping_range * secure_metrics.encode_training(reply.reward, reply.loss, reply.cash)
        return secure.secure_train_reply(np.concatenate([reply.params, metrics]), wire.encode_train_digest(reply.digest),
                                         seed)
    if message_type == wire.EVALUATE:
        runs, baselines = wire.decode_evaluate(content)
        return wire.encode_evaluate_reply(node.evaluate(runs, baselines))
    raise ValueError(f"unknown message type {message_type!r}")


def _evaluate_secure(node: PartyNode, content: RecordDict, layout: secure_metrics.EvaluationLayout) -> RecordDict:
    """A secure evaluation's masked-vector stage (:mod:`portfed.flower.secure_metrics`): the party's metrics rows
    (:meth:`PartyNode.evaluate` under ``evaluation.disclosure: averaged``) as one vector for ``secaggplus_mod``,
    scaled into the round's clipping range; refused outside a SecAgg+ round or on a node whose own config does
    not say ``averaged``."""
    clipping_range = secure.secure_clipping_range(content)
    if clipping_range is None:
        raise ValueError("refused: a secure evaluation's request outside a SecAgg+ round")
    runs, _ = wire.decode_evaluate(content)
    reply = node.evaluate(runs, baselines=True)
    if not isinstance(reply, MetricsReply):
        raise ValueError("refused: a secure evaluation sums the parties' metrics of evaluation.disclosure averaged; "
                         "this node's config says per_party")
    vector = clipping_range * secure_metrics.encode(reply, layout)
    seed = secure.rounding_seed(f"evaluate/{node.digest}/{','.join(layout.algorithms)}", 0, node.index)
    return secure.secure_train_reply(vector, secure_metrics.reply_record(node.digest), seed)


def _train(node: PartyNode, content: RecordDict) -> tuple[dict[str, object], TrainReply]:
    """A train message's scalars and the node's reply: a plan trained (:meth:`PartyNode.train`) or, when the node's
    config has ``privacy.mode: local``, its own round from the reference and its noisy message
    (:meth:`PartyNode.train_private`; the node decides from its own config, not from the message)."""
    if node.private:
        scalars, reference = wire.decode_private_train(content)
    else:
        scalars, start, objective = wire.decode_train(content)
    if scalars["party"] != node.index:
        raise wire.WireError(f"refused: a message for party {scalars['party']} reached the node of party {node.index}")
    run, round_index, steps, committed = (str(scalars["run"]), int(scalars["round"]), int(scalars["steps"]),  # type: ignore[call-overload]
                                          int(scalars["committed"]))  # type: ignore[call-overload]
    if node.private:
        return scalars, node.train_private(run, round_index, str(scalars["algorithm"]), reference, steps, committed)
    return scalars, node.train(run, round_index, start, steps, objective, committed=committed)
