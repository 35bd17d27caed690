"""The metrics reply of ``evaluation.disclosure: averaged`` (:mod:`portfed.flower.wire`): config records only."""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.metrics import SUMMARY_METRICS
from portfed.evaluation.relative import RELATIVE_METRICS
from portfed.flower.node import MetricsReply
from portfed.flower.wire.codec import (
    WireError,
    config_record,
    scalar_int,
    scalar_str,
    scalar_strings,
)

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
            row[name] = scalar_str(record, name)
        elif name == "party":
            row[name] = scalar_int(record, name, 0)
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
    index = config_record(content, _METRICS_INDEX)
    if set(index) != _INDEX_FIELDS or index.get("form") != AVERAGED_FORM:
        raise WireError(f"the metrics reply's index holds {sorted(index)} (form {index.get('form')!r}), not "
                        f"{sorted(_INDEX_FIELDS)} of form {AVERAGED_FORM!r}")
    algorithms, count = scalar_strings(index, "algorithms"), scalar_int(index, "baselines", 0)
    if len(set(algorithms)) != len(algorithms):
        raise WireError(f"the metrics reply names an algorithm twice: {algorithms}")
    keys = [f"metrics_agent_{i}" for i in range(len(algorithms))] + [f"metrics_baseline_{j}" for j in range(count)]
    if set(content.config_records) != {_METRICS_INDEX, *keys}:
        raise WireError(f"the metrics reply holds the records {sorted(content.config_records)}, expected "
                        f"{sorted([_METRICS_INDEX, *keys])}")
    rows = [_decoded_row(content.config_records[key], key) for key in keys]
    return MetricsReply(dict(zip(algorithms, rows[:len(algorithms)], strict=True)), rows[len(algorithms):],
                        scalar_int(index, "days", 0), scalar_str(index, "digest"))
