"""Trust boundaries of the Flower deployment on a loopback grid (no runtime): a party is bound to its node,
nodes check every string the server sends, a malformed reply is a rejected row.  The real SuperLink's
listeners are tested in ``test_flower_listeners.py``."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402

from portfed.experiment.config import load_config  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402
from portfed.flower import wire  # noqa: E402
from portfed.flower.client import answer  # noqa: E402
from portfed.flower.cohort import FlowerCohort  # noqa: E402
from portfed.flower.node import PartyNode  # noqa: E402
from portfed.flower.nodes import FlowerSettings, NodeMap  # noqa: E402
from portfed.flower.server import parse_node_map, serve  # noqa: E402

ROOT = Path(__file__).parents[1]
FAST = FlowerSettings(poll_interval=0.001, reply_timeout=1.0, query_timeout=1.0, join_timeout=1.0)
D = 171  # configs/tiny.yaml's EIIE


def small_config(tmp_path: Path) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": 2, "local_steps": 2, "algorithms": ["fedavg"], "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    path = tmp_path / "flower.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def party_nodes(path: Path, root: Path) -> dict[int, PartyNode]:
    """Node ``1000 + 7 k`` holds party ``k``."""
    config = load_config(path)
    return {1000 + 7 * k: PartyNode(config, k, root / f"node_{k}") for k in range(config.parties.count)}


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def plan(n: int = 3) -> CohortPlan:
    return CohortPlan(round_index=0, parties=np.arange(n), steps=1, start=None)


# ----------------------------------------------------------------------------------- a party is bound
def test_a_node_outside_the_operators_map_gets_nothing_and_the_run_is_unaffected(tmp_path: Path) -> None:
    """An outsider's SuperNode claiming party 0 (its own key registered, or any other) is never sent a
    message when the operator passed the map; the honest party 0 trains and gets its deployed model."""
    path = small_config(tmp_path)
    honest = party_nodes(path, tmp_path / "clean")
    known = {node.index: node_id for node_id, node in honest.items()}
    serve(LoopbackGrid(honest), str(path), str(tmp_path / "clean_out"), settings=FAST, nodes=known)

    attacked = party_nodes(path, tmp_path / "attacked")
    impostor = PartyNode(load_config(path), 0, tmp_path / "impostor")
    grid = LoopbackGrid({**attacked, 4242: impostor})
    serve(grid, str(path), str(tmp_path / "attacked_out"), settings=FAST, nodes=known)
    assert not [kind for node, kind in grid.sent if node == 4242]
    assert files(impostor.state_dir) == []  # it trained nothing and received no deployed model
    assert (attacked[1000].deployed_dir / "fedavg" / "party_0.npz").is_file()
    clean, under_attack = np.load(tmp_path / "clean_out" / "fedavg" / "models.npz"), \
        np.load(tmp_path / "attacked_out" / "fedavg" / "models.npz")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_array_equal(clean[key], under_attack[key], err_msg=key)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "clean_out" / "table1.csv"),
                                  pd.read_csv(tmp_path / "attacked_out" / "table1.csv"))


def test_an_outsider_in_the_grid_is_named_and_refused(tmp_path: Path, caplog) -> None:
    grid = LoopbackGrid({**party_nodes(small_config(tmp_path), tmp_path), 4242: None})  # type: ignore[dict-item]
    node_map = NodeMap(grid, 3, "0" * 16, FAST, known={0: 1000, 1: 1007, 2: 1014})
    with caplog.at_level(logging.WARNING):
        node_map.refresh(wait=True)
        node_map.refresh()
    assert node_map.node_of == {0: 1000, 1: 1007, 2: 1014}
    assert node_map.refused == {4242: "not in the operator's node map (no registered key of a party)"}
    assert [r.getMessage() for r in caplog.records].count(
        "node 4242 refused: not in the operator's node map (no registered key of a party)") == 1


def test_without_a_map_a_party_stays_with_its_first_node_and_a_later_claimant_is_refused(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    grid = LoopbackGrid(party_nodes(path, tmp_path))
    node_map = NodeMap(grid, 3, PartyNode(load_config(path), 0, tmp_path).digest, FAST)
    node_map.refresh(wait=True)
    assert node_map.node_of == {0: 1000, 1: 1007, 2: 1014}
    grid.nodes[4242] = PartyNode(load_config(path), 0, tmp_path / "impostor")  # joins later, claims party 0
    cohort = FlowerCohort(grid, node_map, D, "ab" * 8, FAST)
    result = cohort.train(plan())
    assert node_map.node_of[0] == 1000 and node_map.refused == {4242: "claims party 0, which is bound to node 1000"}
    assert not result.rejected and np.isfinite(result.params).all()
    assert [kind for node, kind in grid.sent if node == 4242] == ["query"]  # asked who it is, then nothing


def test_a_registered_node_claiming_another_party_is_refused_and_the_others_train(tmp_path: Path) -> None:
    """Party 1's registered node started as party 0: party 1's messages are refused by it (a rejected row
    with the reason), party 0's own node trains party 0, nothing is written for party 0 on node 1007."""
    path = small_config(tmp_path)
    nodes = party_nodes(path, tmp_path)
    nodes[1007] = PartyNode(load_config(path), 0, tmp_path / "node_1_as_0")
    grid = LoopbackGrid(nodes)
    node_map = NodeMap(grid, 3, nodes[1000].digest, FAST, known={0: 1000, 1: 1007, 2: 1014})
    result = FlowerCohort(grid, node_map, D, "ab" * 8, FAST).train(plan())
    assert [row for row, _ in result.rejected] == [1]
    assert "refused: a message for party 1 reached the node of party 0" in result.rejected[0][1]
    assert np.isfinite(result.params[[0, 2]]).all() and np.isnan(result.params[1]).all()
    assert files(tmp_path / "node_1_as_0") == []
    assert nodes[1000].saved_rounds("ab" * 8) == [0]


def test_the_node_map_of_the_run_config_is_checked(tmp_path: Path) -> None:
    assert parse_node_map("0:11, 1:12,2:13") == {0: 11, 1: 12, 2: 13}
    assert parse_node_map("") is None
    for bad in ("0:11,0:12", "0:x", "0", "-1:3"):
        with pytest.raises(ValueError, match="is not a new party:node-id pair"):
            parse_node_map(bad)
    grid = LoopbackGrid({})
    with pytest.raises(ValueError, match="one node to several parties"):
        NodeMap(grid, 2, "0" * 16, FAST, known={0: 5, 1: 5})
    with pytest.raises(ValueError, match=r"names parties \[0\]; the federation has 2"):
        NodeMap(grid, 2, "0" * 16, FAST, known={0: 5})


# ------------------------------------------------------------------ nodes check what the server sends
def test_a_path_traversal_algorithm_name_is_refused_by_the_node(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    node = PartyNode(load_config(path), 0, tmp_path / "deep" / "er" / "node")
    model = np.zeros(D)
    for name in ("../../../x", "fedavg/../../x", "/tmp/x", ".."):
        message = wire.encode_evaluate({name: (model, {})})
        with pytest.raises(ValueError, match="refused: the server names algorithm"):
            answer(node, wire.EVALUATE, message)
    with pytest.raises(ValueError, match="refused"):  # a good name first does not let a bad one through later
        answer(node, wire.EVALUATE, wire.encode_evaluate({"fedavg": (model, {}), "../../../x": (model, {})}))
    assert files(tmp_path) == [path]


def test_the_node_checks_every_field_of_a_train_message(tmp_path: Path) -> None:
    node = PartyNode(load_config(small_config(tmp_path)), 0, tmp_path / "node")
    good = wire.encode_train(CohortPlan(round_index=0, parties=np.array([0]), steps=1, start=None), 0, "ab" * 8, 0)

    def with_scalar(**changes: object) -> RecordDict:
        scalars = dict(good.config_records["scalars"]) | changes
        return RecordDict({"plan": good.array_records["plan"], "scalars": ConfigRecord(scalars)})  # type: ignore[arg-type]

    cases = {"a run key must be a hexadecimal fingerprint": with_scalar(run="../../x"),
             "party must be an integer": with_scalar(party=0.5),
             "round must be >= 0": with_scalar(round=-1),
             "steps must be an integer": with_scalar(steps=True),
             "same_as_start names '../x'": with_scalar(same_as_start=["../x"]),
             "proximal_update must be a string": with_scalar(proximal_update=3),
             "sigma must be a number": with_scalar(sigma="0.5")}
    for reason, message in cases.items():
        with pytest.raises(ValueError, match=reason):
            answer(node, wire.TRAIN, message)
    bad_array = RecordDict({"plan": ArrayRecord({"start": Array(np.zeros((2, 2)))}),
                            "scalars": good.config_records["scalars"]})
    with pytest.raises(wire.WireError, match="start must be a one-dimensional numeric array"):
        answer(node, wire.TRAIN, bad_array)
    assert files(tmp_path / "node") == []


# ------------------------------------------------------------------------ a bad reply is a rejected row
def no_metrics(content: RecordDict) -> RecordDict:
    return RecordDict({"model": content.array_records["model"], "node": content.config_records["node"]})


def metrics_of_the_wrong_kind(content: RecordDict) -> RecordDict:
    return RecordDict({"model": content.array_records["model"], "node": content.config_records["node"],
                       "metrics": MetricRecord({"reward": 1.0})})


def test_a_malformed_reply_is_a_rejected_row_and_the_run_goes_on(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    grid = LoopbackGrid(party_nodes(path, tmp_path))
    grid.tamper[1007, wire.TRAIN] = [no_metrics]  # party 1's round-0 reply
    grid.tamper[1014, wire.TRAIN] = [lambda c: c, metrics_of_the_wrong_kind]  # party 2's round-1 reply
    serve(grid, str(path), str(tmp_path / "out"), settings=FAST)
    quarantine = pd.read_csv(tmp_path / "out" / "fedavg" / "quarantine.csv")
    assert quarantine[["round", "party"]].values.tolist() == [[0, 1], [1, 2]]
    assert "malformed reply: the train reply has no metrics" in quarantine["quarantined"].iloc[0]
    assert "malformed reply: the train reply's metrics is malformed: KeyError" in quarantine["quarantined"].iloc[1]
    rounds = pd.read_csv(tmp_path / "out" / "fedavg" / "rounds.csv")
    trained = rounds.query("not (round == 0 and party == 1) and not (round == 1 and party == 2)")
    assert np.isfinite(trained["train_reward"]).all() and len(trained) == 4
    assert (tmp_path / "out" / "table1.csv").is_file()  # the comparison completed


def test_a_reply_of_another_config_or_party_is_a_rejected_row(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    nodes = party_nodes(path, tmp_path)
    grid = LoopbackGrid(nodes)

    def other_digest(content: RecordDict) -> RecordDict:
        return RecordDict({**content, "node": ConfigRecord({"digest": "f" * 16})})

    grid.tamper[1000, wire.TRAIN] = [other_digest]
    node_map = NodeMap(grid, 3, nodes[1000].digest, FAST, known={0: 1000, 1: 1007, 2: 1014})
    result = FlowerCohort(grid, node_map, D, "ab" * 8, FAST).train(plan())
    assert [row for row, _ in result.rejected] == [0]
    assert result.rejected[0][1].startswith("the node runs another config (digest ffffffffffffffff")
    assert np.isfinite(result.params[1:]).all()


def test_an_evaluation_with_foreign_names_or_parties_is_refused_with_the_reason(tmp_path: Path) -> None:
    """A party's strategy names become column names and table rows on the server: only the expected ones
    pass; an evaluation claiming another party's rows is refused too (the reasons name the party)."""
    path = small_config(tmp_path)
    grid = LoopbackGrid(party_nodes(path, tmp_path))

    def renamed(content: RecordDict) -> RecordDict:
        reply = wire.decode_evaluate_reply(content)
        first = reply.baselines[0]
        baselines = [replace(first, row={**first.row, "strategy": "../x"}), *reply.baselines[1:]]
        return wire.encode_evaluate_reply(replace(reply, baselines=baselines))

    def as_party_0(content: RecordDict) -> RecordDict:
        reply = wire.decode_evaluate_reply(content)
        runs = {name: replace(run, backtest=replace(run.backtest, row={**run.backtest.row, "party": 0}))
                for name, run in reply.runs.items()}
        return wire.encode_evaluate_reply(replace(reply, runs=runs))

    grid.tamper[1007, wire.EVALUATE] = [renamed]
    grid.tamper[1014, wire.EVALUATE] = [as_party_0]
    with pytest.raises(RuntimeError, match=r"party 1: baselines \['\.\./x', .*; party 2: rows of parties \[0, 2\], "
                                           r"asked for party 2"):
        serve(grid, str(path), str(tmp_path / "out"), settings=FAST)
    assert not (tmp_path / "out" / "table1.csv").exists()
