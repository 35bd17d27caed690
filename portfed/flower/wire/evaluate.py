"""The ``evaluate`` message and the per-party evaluation reply (:mod:`portfed.flower.wire`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from portfed.experiment.party import INTERPOLATION_COLUMNS, PartyBacktest
from portfed.flower.node import EvaluationReply, MetricsReply, OwnDeployment, RunEvaluation, RunModels
from portfed.flower.wire.codec import (
    WireError,
    array,
    array_record,
    config_record,
    reading,
    scalar_int,
    scalar_str,
    scalar_strings,
    vector,
)
from portfed.flower.wire.metrics import encode_metrics_reply
from portfed.validation import check_int


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
    return RecordDict({"models": array_record(arrays), "scalars": ConfigRecord(scalars)})  # type: ignore[arg-type]


def decode_evaluate(content: RecordDict) -> tuple[dict[str, RunModels], bool]:
    """Per algorithm, the deployed model and the Fig. 1c snapshots; and whether the baselines are wanted."""
    scalars = config_record(content, "scalars")
    algorithms = scalar_strings(scalars, "algorithms")
    if len(set(algorithms)) != len(algorithms):
        raise WireError(f"the evaluate message names an algorithm twice: {algorithms}")
    baselines = scalars.get("baselines", False)
    if not isinstance(baselines, bool):
        raise WireError(f"baselines must be True or False, got {baselines!r}")
    models = content.array_records.get("models", ArrayRecord())

    def model(name: str) -> np.ndarray:
        if name not in models:
            raise WireError(f"the message has no array models/{name}")
        return vector(models[name], name)

    runs: dict[str, RunModels] = {}
    for i, algorithm in enumerate(algorithms):
        rounds = scalars.get(f"rounds_{i}", [])
        if not isinstance(rounds, list):
            raise WireError(f"rounds_{i} must be a list of rounds, got {rounds!r}")
        snapshots = {check_int(t, f"rounds_{i}", minimum=0, error=WireError):
                     tuple(model(f"{i}/{name}_{t}") for name in ("model", "reference", "previous"))
                     for t in rounds}
        deployed: np.ndarray | OwnDeployment = model(f"{i}/deployed") if f"own_run_{i}" not in scalars else \
            OwnDeployment(scalar_str(scalars, f"own_run_{i}"), scalar_int(scalars, f"own_rounds_{i}", 0),
                          model(f"{i}/reference"))
        runs[algorithm] = (deployed, snapshots)  # type: ignore[assignment]
    return runs, baselines


def _backtest_records(backtest: PartyBacktest, key: str) -> dict[str, ConfigRecord | ArrayRecord]:
    row = {name: (value if isinstance(value, str | bool) else int(value) if name == "party" else float(value))
           for name, value in backtest.row.items()}
    values = backtest.values
    arrays = {} if values is None else {"dates": values.index.asi8.astype(np.int64),
                                        "values": values.to_numpy(np.float64)}
    records: dict[str, ConfigRecord | ArrayRecord] = {f"row_{key}": ConfigRecord(row),
                                                      f"values_{key}": array_record(arrays)}
    if backtest.trades is not None:
        trades = backtest.trades
        records[f"trades_{key}"] = array_record({"dates": trades.index.asi8.astype(np.int64),
                                            "table": trades.to_numpy(np.float64)})
        records[f"trade_columns_{key}"] = ConfigRecord({"columns": [str(c) for c in trades.columns]})
    return records


def _backtest(content: RecordDict, key: str) -> PartyBacktest:
    row = dict(config_record(content, f"row_{key}"))
    arrays = content.array_records.get(f"values_{key}", ArrayRecord())
    values = None
    if "values" in arrays:
        values = pd.Series(arrays["values"].numpy(), index=pd.to_datetime(arrays["dates"].numpy()))
    trades = None
    if f"trades_{key}" in content.array_records:
        columns = list(config_record(content, f"trade_columns_{key}")["columns"])  # type: ignore[arg-type]
        trades = pd.DataFrame(array(content, f"trades_{key}", "table"), columns=columns,
                              index=pd.DatetimeIndex(pd.to_datetime(array(content, f"trades_{key}", "dates")),
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
        records[f"interpolation_{i}"] = array_record({"rows": table.reshape(-1, len(INTERPOLATION_COLUMNS))})
    for j, backtest in enumerate(reply.baselines):
        records |= _backtest_records(backtest, f"baseline_{j}")
    return RecordDict(records)


def decode_evaluate_reply(content: RecordDict) -> EvaluationReply:
    """A node's evaluations (:class:`WireError` naming what is missing or of the wrong kind)."""
    index = config_record(content, "evaluations")
    algorithms = scalar_strings(index, "algorithms")
    count = scalar_int(index, "baselines", 0)
    runs = {}
    with reading("the evaluate reply"):
        for i, algorithm in enumerate(algorithms):
            rows = [{c: (int(v) if c in ("round", "party") else float(v))
                     for c, v in zip(INTERPOLATION_COLUMNS, r, strict=True)}
                    for r in array(content, f"interpolation_{i}", "rows")]
            runs[algorithm] = RunEvaluation(_backtest(content, f"agent_{i}"), rows)  # type: ignore[arg-type]
        baselines = [_backtest(content, f"baseline_{j}") for j in range(count)]
    return EvaluationReply(runs, baselines, digest=scalar_str(index, "digest"))
