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
  costs seconds (:mod:`portfed.flower.cohort`).  A node whose config says ``evaluation.disclosure:
  averaged`` answers the **metrics reply** instead (:func:`encode_metrics_reply`): config records only —
  an index (``form``, ``algorithms``, ``baselines``, ``days``, ``digest``) and one row of
  :data:`METRIC_FIELDS` scalars per algorithm and baseline; no array at all.  Its decoder refuses any
  array, any record or field it does not name and any value of the wrong kind.

Only parameter vectors, the plan's scalars and metrics are sent: never prices or generator state.
Every array travels as float64 (dates as int64 nanoseconds), so a parameter vector arrives bit for bit.

**Decoding trusts nothing.**  Either side may be hostile (docs/flower.md, "Threat model"): every
decoder checks each field's type (an integer is an ``int``, not a float or a bool; a name is a
``str``; a vector is one-dimensional) and raises :class:`WireError` naming the field — a node
answers it as an error reply, the server makes it a rejected row.  What a value *means* (a run key,
an algorithm name) is checked where it is used (:class:`~portfed.flower.node.PartyNode`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.metrics import SUMMARY_METRICS
from portfed.evaluation.relative import RELATIVE_METRICS
from portfed.experiment.party import INTERPOLATION_COLUMNS, PartyBacktest
from portfed.federation import CohortPlan, LocalObjective
from portfed.flower.node import (
    EvaluationReply,
    MetricsReply,
    OwnDeployment,
    RunEvaluation,
    RunModels,
    TrainReply,
)
from portfed.validation import check_int

QUERY, TRAIN, EVALUATE = "query", "train", "evaluate"
_PLAN_ARRAYS = ("start", "target", "prox_center")


class WireError(ValueError):
    """A message that does not hold what its type promises (names the missing or bad field)."""


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Any ``KeyError``, ``TypeError``, ``ValueError`` or ``IndexError`` while decoding ``what`` as a
    :class:`WireError` naming it (a missing key, a value of the wrong kind)."""
    try:
        yield
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise WireError(f"{what} is malformed: {type(error).__name__}: {error}") from error


def _int(record: ConfigRecord, name: str, minimum: int | None = None) -> int:
    if name not in record:
        raise WireError(f"the message has no scalar {name!r}")
    return check_int(record[name], name, minimum=minimum, error=WireError)


def _str(record: ConfigRecord, name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        raise WireError(f"{name} must be a string, got {value!r}")
    return value


def _strings(record: ConfigRecord, name: str) -> list[str]:
    value = record.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WireError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


def _vector(array: Array, name: str) -> np.ndarray:
    value = array.numpy()
    if value.ndim != 1 or not np.issubdtype(value.dtype, np.number):
        raise WireError(f"{name} must be a one-dimensional numeric array, got {value.dtype} of shape {value.shape}")
    return value


def _arrays(values: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in values.items()})


def _array(content: RecordDict, record: str, name: str) -> np.ndarray:
    try:
        return content.array_records[record][name].numpy()
    except KeyError as error:
        raise WireError(f"the message has no array {record}/{name}") from error


def _config(content: RecordDict, record: str) -> ConfigRecord:
    if record not in content.config_records:
        raise WireError(f"the message has no config record {record!r}")
    return content.config_records[record]


# ---------------------------------------------------------------------------------------- query
def encode_query_reply(party: int, digest: str) -> RecordDict:
    # ``answered_at`` makes every answer a new object: Flower stores message contents by their hash and
    # refuses to push an object it already holds (a node asked twice would otherwise fail to answer).
    return RecordDict({"node": ConfigRecord({"party": int(party), "digest": digest, "answered_at": time.time()})})


def decode_query_reply(content: RecordDict) -> tuple[int, str]:
    """The party index and config digest a node's handshake answer claims."""
    node = _config(content, "node")
    return _int(node, "party"), _str(node, "digest")


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
    return RecordDict({"plan": _arrays(arrays), "scalars": ConfigRecord(scalars)})


def decode_train(content: RecordDict) -> tuple[dict[str, object], np.ndarray | None, LocalObjective]:
    """The scalars (``run``, ``round``, ``party``, ``steps``, ``committed``, each checked), the ``start``
    vector (``None``: continue) and the :class:`LocalObjective` of a train message."""
    record = _config(content, "scalars")
    scalars: dict[str, object] = {"run": _str(record, "run"), "round": _int(record, "round", 0),
                                  "party": _int(record, "party", 0), "steps": _int(record, "steps", 0),
                                  "committed": _int(record, "committed", 0)}
    arrays = content.array_records.get("plan", ArrayRecord())
    unknown = sorted(set(arrays) - set(_PLAN_ARRAYS))
    if unknown:
        raise WireError(f"the train message has unknown arrays {unknown}")
    vectors = {name: _vector(arrays[name], name) if name in arrays else None for name in _PLAN_ARRAYS}
    for name in _strings(record, "same_as_start"):
        if name not in _PLAN_ARRAYS[1:]:
            raise WireError(f"same_as_start names {name!r}; it may name {list(_PLAN_ARRAYS[1:])}")
        vectors[name] = vectors["start"]
    for name in ("sigma", "prox_coef"):
        if isinstance(record.get(name), bool) or not isinstance(record.get(name), int | float):
            raise WireError(f"the train message's {name} must be a number, got {record.get(name)!r}")
    with _reading("the train message's objective"):
        objective = LocalObjective(target=vectors["target"], sigma=float(record["sigma"]),  # type: ignore[arg-type]
                                   proximal_update=_str(record, "proximal_update"),  # type: ignore[arg-type]
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
    return RecordDict({"plan": _arrays({"reference": plan.references[row]}), "scalars": ConfigRecord(scalars)})


def decode_private_train(content: RecordDict) -> tuple[dict[str, object], np.ndarray]:
    """The scalars (``run``, ``round``, ``party``, ``steps``, ``committed``, ``algorithm``, each checked) and the
    reference of a private train message (:func:`encode_private_train`)."""
    record = _config(content, "scalars")
    scalars: dict[str, object] = {"run": _str(record, "run"), "round": _int(record, "round", 0),
                                  "party": _int(record, "party", 0), "steps": _int(record, "steps", 0),
                                  "committed": _int(record, "committed", 0), "algorithm": _str(record, "algorithm")}
    arrays = content.array_records.get("plan", ArrayRecord())
    if set(arrays) != {"reference"}:
        raise WireError(f"a private train message carries the array reference only, got {sorted(arrays)}")
    return scalars, _vector(arrays["reference"], "reference")


def encode_train_reply(reply: TrainReply) -> RecordDict:
    return RecordDict({"model": _arrays({"params": reply.params}),
                       "metrics": MetricRecord({"reward": reply.reward, "loss": reply.loss, "cash": reply.cash}),
                       "node": ConfigRecord({"digest": reply.digest})})


def decode_train_metrics(content: RecordDict) -> tuple[float, float, float, str]:
    """A train reply's metrics (reward, loss, cash) and config digest — all a secure round's reply
    carries in clear (:mod:`portfed.flower.secure`)."""
    metrics = content.metric_records.get("metrics")
    if metrics is None:
        raise WireError("the train reply has no metrics")
    with _reading("the train reply's metrics"):
        reward, loss, cash = (float(metrics[name]) for name in ("reward", "loss", "cash"))
    return reward, loss, cash, _str(_config(content, "node"), "digest")


def decode_train_reply(content: RecordDict) -> TrainReply:
    """A node's train reply (:class:`WireError` naming what is missing or of the wrong kind)."""
    reward, loss, cash, digest = decode_train_metrics(content)
    model = content.array_records.get("model")
    if model is None or "params" not in model:
        raise WireError("the train reply has no array model/params")
    return TrainReply(params=np.asarray(_vector(model["params"], "params"), dtype=np.float64),
                      reward=reward, loss=loss, cash=cash, digest=digest)


# ---------------------------------------------------------------------------------------- evaluation
def encode_evaluate(runs: dict[str, RunModels], baselines: bool = False) -> RecordDict:
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, object] = {"algorithms": list(runs), "baselines": bool(baselines)}
    for i, (deployed, snapshots) in enumerate(runs.values()):
        if isinstance(deployed, OwnDeployment):
            arrays[f"{i}/reference"] = deployed.reference
            scalars |= {f"own_run_{i}": deployed.run, f"own_rounds_{i}": int(deployed.rounds)}
        else:
            arrays[f"{i}/deployed"] = deployed
        for t, (model, reference, previous) in snapshots.items():
            arrays |= {f"{i}/model_{t}": model, f"{i}/reference_{t}": reference, f"{i}/previous_{t}": previous}
        scalars[f"rounds_{i}"] = [int(t) for t in sorted(snapshots)]
    return RecordDict({"models": _arrays(arrays), "scalars": ConfigRecord(scalars)})  # type: ignore[arg-type]


def decode_evaluate(content: RecordDict) -> tuple[dict[str, RunModels], bool]:
    """Per algorithm, the deployed model and the Fig. 1c snapshots; and whether the baselines are wanted."""
    scalars = _config(content, "scalars")
    algorithms = _strings(scalars, "algorithms")
    if len(set(algorithms)) != len(algorithms):
        raise WireError(f"the evaluate message names an algorithm twice: {algorithms}")
    baselines = scalars.get("baselines", False)
    if not isinstance(baselines, bool):
        raise WireError(f"baselines must be True or False, got {baselines!r}")
    models = content.array_records.get("models", ArrayRecord())

    def vector(name: str) -> np.ndarray:
        if name not in models:
            raise WireError(f"the message has no array models/{name}")
        return _vector(models[name], name)

    runs: dict[str, RunModels] = {}
    for i, algorithm in enumerate(algorithms):
        rounds = scalars.get(f"rounds_{i}", [])
        if not isinstance(rounds, list):
            raise WireError(f"rounds_{i} must be a list of rounds, got {rounds!r}")
        snapshots = {check_int(t, f"rounds_{i}", minimum=0, error=WireError):
                     tuple(vector(f"{i}/{name}_{t}") for name in ("model", "reference", "previous"))
                     for t in rounds}
        deployed: np.ndarray | OwnDeployment = vector(f"{i}/deployed") if f"own_run_{i}" not in scalars else \
            OwnDeployment(_str(scalars, f"own_run_{i}"), _int(scalars, f"own_rounds_{i}", 0), vector(f"{i}/reference"))
        runs[algorithm] = (deployed, snapshots)  # type: ignore[assignment]
    return runs, baselines


def _backtest_records(backtest: PartyBacktest, key: str) -> dict[str, ConfigRecord | ArrayRecord]:
    row = {name: (value if isinstance(value, str | bool) else int(value) if name == "party" else float(value))
           for name, value in backtest.row.items()}
    values = backtest.values
    arrays = {} if values is None else {"dates": values.index.asi8.astype(np.int64),
                                        "values": values.to_numpy(np.float64)}
    records: dict[str, ConfigRecord | ArrayRecord] = {f"row_{key}": ConfigRecord(row),
                                                      f"values_{key}": _arrays(arrays)}
    if backtest.trades is not None:
        trades = backtest.trades
        records[f"trades_{key}"] = _arrays({"dates": trades.index.asi8.astype(np.int64),
                                            "table": trades.to_numpy(np.float64)})
        records[f"trade_columns_{key}"] = ConfigRecord({"columns": [str(c) for c in trades.columns]})
    return records


def _backtest(content: RecordDict, key: str) -> PartyBacktest:
    row = dict(_config(content, f"row_{key}"))
    arrays = content.array_records.get(f"values_{key}", ArrayRecord())
    values = None
    if "values" in arrays:
        values = pd.Series(arrays["values"].numpy(), index=pd.to_datetime(arrays["dates"].numpy()))
    trades = None
    if f"trades_{key}" in content.array_records:
        columns = list(_config(content, f"trade_columns_{key}")["columns"])  # type: ignore[arg-type]
        trades = pd.DataFrame(_array(content, f"trades_{key}", "table"), columns=columns,
                              index=pd.DatetimeIndex(pd.to_datetime(_array(content, f"trades_{key}", "dates")),
                                                     name="date"))
    return PartyBacktest(str(row["strategy"]), int(row["party"]), row, values, trades)  # type: ignore[arg-type]


def encode_evaluate_reply(reply: EvaluationReply | MetricsReply) -> RecordDict:
    if isinstance(reply, MetricsReply):
        return encode_metrics_reply(reply)
    records: dict[str, ConfigRecord | ArrayRecord] = {
        "evaluations": ConfigRecord({"algorithms": list(reply.runs), "baselines": len(reply.baselines),
                                     "digest": reply.digest})}
    for i, run in enumerate(reply.runs.values()):
        table = np.array([[row[c] for c in INTERPOLATION_COLUMNS] for row in run.interpolation], dtype=np.float64)
        records |= _backtest_records(run.backtest, f"agent_{i}")
        records[f"interpolation_{i}"] = _arrays({"rows": table.reshape(-1, len(INTERPOLATION_COLUMNS))})
    for j, backtest in enumerate(reply.baselines):
        records |= _backtest_records(backtest, f"baseline_{j}")
    return RecordDict(records)


def decode_evaluate_reply(content: RecordDict) -> EvaluationReply:
    """A node's evaluations (:class:`WireError` naming what is missing or of the wrong kind)."""
    index = _config(content, "evaluations")
    algorithms = _strings(index, "algorithms")
    count = _int(index, "baselines", 0)
    runs = {}
    with _reading("the evaluate reply"):
        for i, algorithm in enumerate(algorithms):
            rows = [{c: (int(v) if c in ("round", "party") else float(v))
                     for c, v in zip(INTERPOLATION_COLUMNS, r, strict=True)}
                    for r in _array(content, f"interpolation_{i}", "rows")]
            runs[algorithm] = RunEvaluation(_backtest(content, f"agent_{i}"), rows)  # type: ignore[arg-type]
        baselines = [_backtest(content, f"baseline_{j}") for j in range(count)]
    return EvaluationReply(runs, baselines, digest=_str(index, "digest"))


# ---------------------------------------------------------------------------------------- averaged evaluation
#: The scalars of a metrics reply's row, by kind (every other field is refused).
_TEXT_FIELDS = ("strategy", "failed", BENCHMARK_COLUMN)
METRIC_FIELDS: tuple[str, ...] = ("strategy", "party", "hindsight", *SUMMARY_METRICS, "mean_cash", "asset_spread",
                                  "failed", BENCHMARK_COLUMN, *RELATIVE_METRICS)
_METRICS_INDEX = "metrics_index"
_INDEX_FIELDS = {"form", "algorithms", "baselines", "days", "digest"}
AVERAGED_FORM = "averaged"


def _metric_row(row: dict[str, object]) -> ConfigRecord:
    if set(row) != set(METRIC_FIELDS):
        raise ValueError(f"a metrics row holds {sorted(row)}, not the fields {list(METRIC_FIELDS)}")
    def scalar(name: str) -> str | bool | int | float:
        value = row[name]
        if name in _TEXT_FIELDS:
            return str(value)
        if name == "hindsight":
            return bool(value)
        return int(value) if name == "party" else float(value)  # type: ignore[call-overload,arg-type]

    return ConfigRecord({name: scalar(name) for name in METRIC_FIELDS})


def encode_metrics_reply(reply: MetricsReply) -> RecordDict:
    """A node's averaged-disclosure evaluation (module docstring): config records, no array."""
    records = {_METRICS_INDEX: ConfigRecord({"form": AVERAGED_FORM, "algorithms": list(reply.runs),
                                             "baselines": len(reply.baselines), "days": int(reply.days),
                                             "digest": reply.digest})}
    records |= {f"metrics_agent_{i}": _metric_row(row) for i, row in enumerate(reply.runs.values())}
    records |= {f"metrics_baseline_{j}": _metric_row(row) for j, row in enumerate(reply.baselines)}
    return RecordDict(records)  # type: ignore[arg-type]


def _decoded_row(record: ConfigRecord, key: str) -> dict[str, object]:
    """One metrics row, every field present and of its kind (text, the party an ``int``, ``hindsight`` a
    ``bool``, a metric a float — NaN for a failed backtest), nothing else."""
    if set(record) != set(METRIC_FIELDS):
        extra, missing = sorted(set(record) - set(METRIC_FIELDS)), sorted(set(METRIC_FIELDS) - set(record))
        raise WireError(f"{key} has fields {extra} it may not have and lacks {missing}")
    row: dict[str, object] = {}
    for name in METRIC_FIELDS:
        value = record[name]
        if name in _TEXT_FIELDS:
            row[name] = _str(record, name)
        elif name == "party":
            row[name] = _int(record, name, 0)
        elif name == "hindsight":
            if not isinstance(value, bool):
                raise WireError(f"{key}: hindsight must be True or False, got {value!r}")
            row[name] = value
        elif isinstance(value, float):
            row[name] = value
        else:
            raise WireError(f"{key}: {name} must be a float, got {value!r}")
    return row


def decode_metrics_reply(content: RecordDict) -> MetricsReply:
    """A node's averaged-disclosure evaluation; :class:`WireError` for any array or metric record, a record
    or field the form does not name, or a value of the wrong kind."""
    if len(content.array_records) or len(content.metric_records):
        raise WireError(f"the metrics reply carries arrays or metric records "
                        f"{sorted(content.array_records) + sorted(content.metric_records)}; it may carry scalars only")
    index = _config(content, _METRICS_INDEX)
    if set(index) != _INDEX_FIELDS or index.get("form") != AVERAGED_FORM:
        raise WireError(f"the metrics reply's index holds {sorted(index)} (form {index.get('form')!r}), not "
                        f"{sorted(_INDEX_FIELDS)} of form {AVERAGED_FORM!r}")
    algorithms, count = _strings(index, "algorithms"), _int(index, "baselines", 0)
    if len(set(algorithms)) != len(algorithms):
        raise WireError(f"the metrics reply names an algorithm twice: {algorithms}")
    keys = [f"metrics_agent_{i}" for i in range(len(algorithms))] + [f"metrics_baseline_{j}" for j in range(count)]
    if set(content.config_records) != {_METRICS_INDEX, *keys}:
        raise WireError(f"the metrics reply holds the records {sorted(content.config_records)}, expected "
                        f"{sorted([_METRICS_INDEX, *keys])}")
    rows = [_decoded_row(content.config_records[key], key) for key in keys]
    return MetricsReply(dict(zip(algorithms, rows[:len(algorithms)], strict=True)), rows[len(algorithms):],
                        _int(index, "days", 0), _str(index, "digest"))
