"""What crosses the wire between the ServerApp and a party's ClientApp, as Flower records.

Three message types (the ``message_type`` of a Flower message; the ClientApp routes on it):

* ``query`` — the handshake: the node answers its party index and the digest of its config
  (:func:`~portfed.flower.node.config_digest`), so the server maps node ids to parties;
* ``train`` — one row of a :class:`~portfed.federation.CohortPlan`: arrays ``start``, ``target``,
  ``prox_center`` (each only when the plan has it, and a vector equal to ``start`` — FedProx's and
  FedAMP's proximal centre — named in ``same_as_start`` instead of sent twice) and the scalars
  ``run``, ``round``, ``party``, ``steps``, ``sigma``, ``proximal_update``, ``prox_coef``,
  ``committed`` (the node turns ``σ`` into its update with its own learning rate); the reply is the
  array ``params``, the metrics ``reward`` and ``loss`` and the node's config ``digest``;
  Under ``privacy.mode: local`` the train message carries the array ``reference`` (``r_k``) and the scalars
  ``run``, ``round``, ``party``, ``steps``, ``committed`` and ``algorithm`` instead: the node makes its own
  Local-Solve and replies its noisy message as ``params`` (:meth:`~portfed.flower.node.PartyNode.train_private`);
* ``evaluate`` — for every algorithm ``i`` of the comparison, its deployed model ``i/deployed`` (under
  ``privacy.mode: local`` instead the reference ``i/reference`` with the scalars ``own_run_i`` and
  ``own_rounds_i``, from which the node deploys its own model, :class:`~portfed.flower.node.OwnDeployment`) and,
  for each Fig. 1c round ``t``, the party's ``i/model_t``, ``i/reference_t`` and ``i/previous_t``, and
  whether the baselines are wanted too; the reply is, per algorithm, the backtest (its metrics row
  as a config record, its portfolio values as arrays, its trades — value, turnover, cost and the
  weights held each day, :func:`~portfed.experiment.party.backtests.trades_frame` — as an array with their
  column names: the universe is a function of the config the server already holds, and the values
  already tell the decisions' outcome) and the Fig. 1c rows as one array, when
  asked one backtest per baseline, and the node's config digest.  One exchange evaluates the whole comparison: a message round
  costs seconds (:mod:`portfed.flower.nodes`).  A node whose config says ``evaluation.disclosure:
  averaged`` answers the **metrics reply** instead (:func:`encode_metrics_reply`): config records only —
  an index (``form``, ``algorithms``, ``baselines``, ``days``, ``digest``) and one row of
  :data:`METRIC_FIELDS` scalars per algorithm and baseline; no array at all.  Its decoder refuses any
  array, any record or field it does not name and any value of the wrong kind.  Under secure aggregation
  that evaluation is instead a SecAgg+ round of ``train`` messages carrying the evaluate message and a
  request record, answered with the metrics as one masked vector (:mod:`portfed.flower.secure_metrics`).

Only parameter vectors, the plan's scalars and metrics are sent: never prices or generator state.
Every array travels as float64 (dates as int64 nanoseconds), so a parameter vector arrives bit for bit.

**Decoding trusts nothing.**  Either side may be hostile (docs/flower.md, "Threat model"): every
decoder checks each field's type (an integer is an ``int``, not a float or a bool; a name is a
``str``; a vector is one-dimensional) and raises :class:`WireError` naming the field — a node
answers it as an error reply, the server makes it a rejected row.  What a value *means* (a run key,
an algorithm name) is checked where it is used (:class:`~portfed.flower.node.PartyNode`).
"""

from portfed.flower.wire.codec import EVALUATE, QUERY, TRAIN, WireError
from portfed.flower.wire.evaluate import (
    decode_evaluate,
    decode_evaluate_reply,
    encode_evaluate,
    encode_evaluate_reply,
)
from portfed.flower.wire.metrics import (
    AVERAGED_FORM,
    METRIC_FIELDS,
    decode_metrics_reply,
    encode_metrics_reply,
)
from portfed.flower.wire.train import (
    decode_private_train,
    decode_query_reply,
    decode_train,
    decode_train_digest,
    decode_train_metrics,
    decode_train_reply,
    encode_private_train,
    encode_query_reply,
    encode_train,
    encode_train_digest,
    encode_train_reply,
)

__all__ = ["AVERAGED_FORM", "EVALUATE", "METRIC_FIELDS", "QUERY", "TRAIN", "WireError", "decode_evaluate",
           "decode_evaluate_reply", "decode_metrics_reply", "decode_private_train", "decode_query_reply",
           "decode_train", "decode_train_digest", "decode_train_metrics", "decode_train_reply", "encode_evaluate",
           "encode_evaluate_reply", "encode_metrics_reply", "encode_private_train", "encode_query_reply", "encode_train",
           "encode_train_digest", "encode_train_reply"]
