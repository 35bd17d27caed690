"""The handshake and the train messages (:mod:`portfed.flower.wire`: ``query``, ``train`` and their replies)."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from portfed.federation import CohortPlan, LocalObjective
from portfed.flower.node import TrainReply
from portfed.flower.wire.codec import (
    WireError,
    array_record,
    config_record,
    reading,
    scalar_int,
    scalar_str,
    scalar_strings,
    vector,
)

_PLAN_ARRAYS = ("start", "target", "prox_center")

def encode_query_reply(party: int, digest: str) -> RecordDict:
    # ``answered_at`` makes every answer a new object: Flower stores message contents by their hash and
    # refuses to push an object it already holds (a node asked twice would otherwise fail to answer).
    return RecordDict({"node": ConfigRecord({"party": int(party), "digest": digest, "answered_at": time.time()})})


def decode_query_reply(content: RecordDict) -> tuple[int, str]:
    """The party index and config digest a node's handshake answer claims."""
    node = config_record(content, "node")
    return scalar_int(node, "party"), scalar_str(node, "digest")


# ---------------------------------------------------------------------------------------- train
def encode_train(plan: CohortPlan, row: int, run: str, committed: int) -> RecordDict:
    """Row ``row`` of ``plan`` (its party's Local-Solve) for run ``run``; ``committed``: the rounds the
    server's checkpoint holds (the node may forget older states, :class:`~portfed.flower.node.PartyNode`)."""
    arrays, same = {}, []
    for name in _PLAN_ARRAYS:
        value = getattr(plan, name)
        if value is None:
            continue
        if name != "start" and plan.start is not None and np.array_equal(value[row], plan.start[row]):
            same.append(name)
        else:
            arrays[name] = value[row]
    scalars = {"run": run, "round": plan.round_index, "party": int(plan.parties[row]),
               "steps": int(plan.steps[row]), "sigma": float(plan.sigma[row]),  # type: ignore[index]
               "proximal_update": plan.proximal_update,
               "prox_coef": float(plan.prox_coef[row]), "committed": int(committed),  # type: ignore[index]
               "same_as_start": same}
    return RecordDict({"plan": array_record(arrays), "scalars": ConfigRecord(scalars)})


def decode_train(content: RecordDict) -> tuple[dict[str, object], np.ndarray | None, LocalObjective]:
    """The scalars (``run``, ``round``, ``party``, ``steps``, ``committed``, each checked), the ``start``
    vector (``None``: continue) and the :class:`LocalObjective` of a train message."""
    record = config_record(content, "scalars")
    scalars: dict[str, object] = {"run": scalar_str(record, "run"), "round": scalar_int(record, "round", 0),
                                  "party": scalar_int(record, "party", 0), "steps": scalar_int(record, "steps", 0),
                                  "committed": scalar_int(record, "committed", 0)}
    arrays = content.array_records.get("plan", ArrayRecord())
    unknown = sorted(set(arrays) - set(_PLAN_ARRAYS))
    if unknown:
        raise WireError(f"the train message has unknown arrays {unknown}")
    vectors = {name: vector(arrays[name], name) if name in arrays else None for name in _PLAN_ARRAYS}
    for name in scalar_strings(record, "same_as_start"):
        if name not in _PLAN_ARRAYS[1:]:
            raise WireError(f"same_as_start names {name!r}; it may name {list(_PLAN_ARRAYS[1:])}")
        vectors[name] = vectors["start"]
    for name in ("sigma", "prox_coef"):
        if isinstance(record.get(name), bool) or not isinstance(record.get(name), int | float):
            raise WireError(f"the train message's {name} must be a number, got {record.get(name)!r}")
    with reading("the train message's objective"):
        objective = LocalObjective(target=vectors["target"], sigma=float(record["sigma"]),  # type: ignore[arg-type]
                                   proximal_update=scalar_str(record, "proximal_update"),  # type: ignore[arg-type]
                                   prox_center=vectors["prox_center"], prox_coef=float(record["prox_coef"]))  # type: ignore[arg-type]
    return scalars, vectors["start"], objective


def encode_private_train(plan: CohortPlan, row: int, run: str, committed: int, algorithm: str) -> RecordDict:
    """Row ``row`` of ``plan`` for a party that makes its own round (``privacy.mode: local``): its reference
    ``r_k`` (``plan.references``), its steps and ``algorithm``'s name — no start, target or weights, which
    the node computes from its own model."""
    if plan.references is None:
        raise ValueError("a private train message needs the plan's references (the round loop gives them to a "
                         "cohort whose parties send private messages)")
    scalars = {"run": run, "round": plan.round_index, "party": int(plan.parties[row]),
               "steps": int(plan.steps[row]), "committed": int(committed), "algorithm": algorithm}
    return RecordDict({"plan": array_record({"reference": plan.references[row]}), "scalars": ConfigRecord(scalars)})


def decode_private_train(content: RecordDict) -> tuple[dict[str, object], np.ndarray]:
    """The scalars (``run``, ``round``, ``party``, ``steps``, ``committed``, ``algorithm``, each checked) and the
    reference of a private train message (:func:`encode_private_train`)."""
    record = config_record(content, "scalars")
    scalars: dict[str, object] = {"run": scalar_str(record, "run"), "round": scalar_int(record, "round", 0),
                                  "party": scalar_int(record, "party", 0), "steps": scalar_int(record, "steps", 0),
                                  "committed": scalar_int(record, "committed", 0), "algorithm": scalar_str(record, "algorithm")}
    arrays = content.array_records.get("plan", ArrayRecord())
    if set(arrays) != {"reference"}:
        raise WireError(f"a private train message carries the array reference only, got {sorted(arrays)}")
    return scalars, vector(arrays["reference"], "reference")


def encode_train_reply(reply: TrainReply) -> RecordDict:
    return RecordDict({"model": array_record({"params": reply.params}),
                       "metrics": MetricRecord({"reward": reply.reward, "loss": reply.loss, "cash": reply.cash}),
                       "node": ConfigRecord({"digest": reply.digest})})


def encode_train_digest(digest: str) -> RecordDict:
    """What a secure round's reply carries in clear when its training metrics are masked with its model (under
    ``evaluation.disclosure: averaged``, :mod:`portfed.flower.secure_metrics`): the node's config digest only."""
    return RecordDict({"node": ConfigRecord({"digest": digest})})


def decode_train_digest(content: RecordDict) -> str:
    """A train reply's config digest."""
    return scalar_str(config_record(content, "node"), "digest")


def decode_train_metrics(content: RecordDict) -> tuple[float, float, float, str]:
    """A train reply's metrics (reward, loss, cash) and config digest — all a secure round's reply
    carries in clear (:mod:`portfed.flower.secure`)."""
    metrics = content.metric_records.get("metrics")
    if metrics is None:
        raise WireError("the train reply has no metrics")
    with reading("the train reply's metrics"):
        reward, loss, cash = (float(metrics[name]) for name in ("reward", "loss", "cash"))
    return reward, loss, cash, decode_train_digest(content)


def decode_train_reply(content: RecordDict) -> TrainReply:
    """A node's train reply (:class:`WireError` naming what is missing or of the wrong kind)."""
    reward, loss, cash, digest = decode_train_metrics(content)
    model = content.array_records.get("model")
    if model is None or "params" not in model:
        raise WireError("the train reply has no array model/params")
    return TrainReply(params=np.asarray(vector(model["params"], "params"), dtype=np.float64),
                      reward=reward, loss=loss, cash=cash, digest=digest)
