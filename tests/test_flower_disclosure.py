"""``evaluation.disclosure: averaged`` on Flower: a node sends only its scalar metrics, strictly checked, and
the server publishes their means (issue 49)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict  # noqa: E402

from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.party import initial_parameters  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.flower import wire  # noqa: E402
from portfed.flower.node import EvaluationReply, MetricsReply, PartyNode  # noqa: E402
from portfed.flower.nodes import FlowerSettings  # noqa: E402
from portfed.flower.server import serve  # noqa: E402

ROOT = Path(__file__).parents[1]
FAST = FlowerSettings(poll_interval=0.001, reply_timeout=1.0, query_timeout=1.0, join_timeout=1.0)
PER_PARTY_FILES = {"party_metrics.csv", "portfolio_values.csv", "weights.csv", "interpolation.csv",
                   "baseline_values.csv", "fig1c_interpolation.png", "fig3a_portfolio_values.png"}


def config_file(tmp_path: Path, disclosure: str) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": 2, "local_steps": 3, "algorithms": ["fedavg"], "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    raw["evaluation"]["disclosure"] = disclosure
    path = tmp_path / f"{disclosure}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def replies(tmp_path_factory) -> tuple[EvaluationReply, MetricsReply, PartyNode]:
    """Party 1's evaluation of one model under both modes."""
    tmp = tmp_path_factory.mktemp("node")
    full, averaged = (PartyNode(load_config(config_file(tmp, mode)), 1, tmp / mode) for mode in ("per_party", "averaged"))
    model = np.asarray(initial_parameters(full.config), dtype=np.float64).reshape(-1)
    snapshot = {1: (model, model, model)}
    return (full.evaluate({"fedavg": (model, snapshot)}, baselines=True),
            averaged.evaluate({"fedavg": (model, snapshot)}, baselines=True), averaged)


def test_an_averaged_node_sends_only_its_metrics_rows_and_keeps_its_weights(replies) -> None:
    full, averaged, node = replies
    assert isinstance(averaged, MetricsReply) and isinstance(full, EvaluationReply)
    content = wire.encode_evaluate_reply(averaged)
    assert not len(content.array_records) and not len(content.metric_records)
    assert set(content.config_records) == {"metrics_index", "metrics_agent_0", "metrics_baseline_0",
                                           "metrics_baseline_1"}
    decoded = wire.decode_metrics_reply(content)
    assert decoded == averaged and decoded.days == 40
    row = decoded.runs["fedavg"]
    assert set(row) == set(wire.METRIC_FIELDS) and row["party"] == 1
    for key, value in full.runs["fedavg"].backtest.row.items():  # the same backtest as per_party's
        assert row[key] == value or (np.isnan(value) and np.isnan(row[key])), key  # type: ignore[arg-type]
    assert (node.deployed_dir / "fedavg" / "weights.csv").is_file()  # the holdings stay on the node's disk


def tampered(content: RecordDict, change) -> RecordDict:
    records = {**content.config_records, **content.array_records}
    change(records)
    return RecordDict(records)


def with_field(records, key, name, value) -> None:
    records[key] = ConfigRecord({**records[key], name: value})


def without_field(records, key, name) -> None:
    records[key] = ConfigRecord({k: v for k, v in records[key].items() if k != name})


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(values=ArrayRecord({"v": Array(np.ones(3))})), "arrays"),
    (lambda r: with_field(r, "metrics_agent_0", "weights", 0.5), "fields \\['weights'\\]"),
    (lambda r: without_field(r, "metrics_agent_0", "sharpe"), "lacks \\['sharpe'\\]"),
    (lambda r: with_field(r, "metrics_agent_0", "party", 1.0), "party"),
    (lambda r: with_field(r, "metrics_agent_0", "sharpe", "high"), "sharpe must be a float"),
    (lambda r: with_field(r, "metrics_agent_0", "hindsight", 0), "hindsight"),
    (lambda r: r.update(extra=ConfigRecord({"x": 1})), "records"),
    (lambda r: with_field(r, "metrics_index", "values", [1.0]), "index"),
    (lambda r: with_field(r, "metrics_index", "form", "per_party"), "form"),
])
def test_a_malformed_or_extended_metrics_reply_is_refused(replies, change, message) -> None:
    content = tampered(wire.encode_evaluate_reply(replies[1]), change)
    with pytest.raises(wire.WireError, match=message):
        wire.decode_metrics_reply(content)


def test_a_per_party_reply_is_not_a_metrics_reply(replies) -> None:
    with pytest.raises(wire.WireError):
        wire.decode_metrics_reply(wire.encode_evaluate_reply(replies[0]))


def test_an_averaged_deployment_publishes_the_party_means_of_the_metrics_only(tmp_path: Path) -> None:
    path = config_file(tmp_path, "averaged")
    config = load_config(path)
    grid = LoopbackGrid({1000 + k: PartyNode(config, k, tmp_path / f"node_{k}") for k in range(3)})
    seen: list[RecordDict] = []

    def record(content: RecordDict) -> RecordDict:
        seen.append(content)
        return content

    grid.tamper = {(node, "evaluate"): [record] for node in grid.nodes}
    serve(grid, str(path), str(tmp_path / "flower"), settings=FAST)
    assert len(seen) == 3 and all(not len(c.array_records) for c in seen)
    written = {p.name for p in (tmp_path / "flower").rglob("*") if p.is_file()}
    assert not written & PER_PARTY_FILES, written & PER_PARTY_FILES
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    remote, local = (pd.read_csv(tmp_path / d / "table1.csv", index_col="Strategy") for d in ("flower", "in_process"))
    assert not [c for c in remote.columns if " std " in c]
    # one-party engines on the nodes round differently from the K-party engine in-process (test_flower_engine)
    pd.testing.assert_frame_equal(remote, local, check_exact=False, rtol=1e-4, atol=1e-6)
    means = pd.read_csv(tmp_path / "flower" / "mean_metrics.csv")
    assert means["days"].tolist() == [40, 40, 40] and means["parties"].tolist() == [3, 3, 3]


def test_the_server_refuses_an_extended_or_misattributed_metrics_reply(tmp_path: Path) -> None:
    path = config_file(tmp_path, "averaged")
    config = load_config(path)
    grid = LoopbackGrid({1000 + k: PartyNode(config, k, tmp_path / f"node_{k}") for k in range(3)})
    grid.tamper = {(1001, "evaluate"): [lambda c: tampered(c, lambda r: r.update(
        values=ArrayRecord({"values": Array(np.ones(40))})))]}
    with pytest.raises(RuntimeError, match=r"party 1: malformed reply: the metrics reply carries arrays"):
        serve(grid, str(path), str(tmp_path / "flower"), settings=FAST)
    grid.tamper = {(1002, "evaluate"): [lambda c: tampered(c, lambda r: with_field(r, "metrics_agent_0", "party", 0))]}
    with pytest.raises(RuntimeError, match=r"party 2: rows of parties \[0, 2\], asked for party 2"):
        serve(grid, str(path), str(tmp_path / "flower"), settings=FAST, resume=True)
    assert not (tmp_path / "flower" / "table1.csv").exists()
