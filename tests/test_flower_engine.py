"""The Flower engine's logic on a loopback grid (no runtime): same runs as in-process, partial participation,
state on the node's disk, bad nodes refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402

from portfed.agents.learner import actor_size, row_size  # noqa: E402
from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.federation import CohortPlan, LocalObjective  # noqa: E402
from portfed.flower import wire  # noqa: E402
from portfed.flower.node import PartyNode  # noqa: E402
from portfed.flower.nodes import FlowerSettings  # noqa: E402
from portfed.flower.server import serve  # noqa: E402

ROOT = Path(__file__).parents[1]
FAST = FlowerSettings(poll_interval=0.001, reply_timeout=1.0, query_timeout=1.0, join_timeout=1.0)


def small_config(tmp_path: Path, **federation: object) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": 2, "local_steps": 3, "algorithms": ["fedavg+", "fedamp"],
                              "checkpoint_every": 2, **federation})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    path = tmp_path / "flower.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def nodes(path: Path, root: Path, order: list[int] | None = None) -> dict[int, PartyNode]:
    config = load_config(path)
    order = list(range(config.parties.count)) if order is None else order
    return {1000 + 7 * i: PartyNode(config, k, root / f"node_{k}") for i, k in enumerate(order)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, LoopbackGrid]:
    tmp = tmp_path_factory.mktemp("flower")
    path = small_config(tmp)
    compare(load_config(path), tmp / "in_process", progress=False, n_jobs=1)
    grid = LoopbackGrid(nodes(path, tmp, order=[2, 0, 1]))
    serve(grid, str(path), str(tmp / "flower"), settings=FAST)
    return tmp / "in_process", tmp / "flower", grid


#: Each node trains its party in a one-party engine, the in-process run all parties in one: the K-party
#: products sum in another order than the one-party ones, so the runs agree to float32 round-off
#: (measured max |Δ| 7e-9 on the party models after 3 rounds), not bit for bit.
ROUND_OFF = {"atol": 1e-6, "rtol": 0}
FRAME_ROUND_OFF = {"check_exact": False, "rtol": 1e-4, "atol": 1e-6}


def test_flower_runs_equal_the_in_process_runs(runs) -> None:
    local, remote, _ = runs
    for name in ("fedavg+", "fedamp"):
        a, b = np.load(local / name / "models.npz"), np.load(remote / name / "models.npz")
        for key in ("party_models", "global_model", "deployed"):
            np.testing.assert_allclose(a[key], b[key], err_msg=f"{name}: {key}", **ROUND_OFF)
        pd.testing.assert_frame_equal(pd.read_csv(local / name / "interpolation.csv"),
                                      pd.read_csv(remote / name / "interpolation.csv"), **FRAME_ROUND_OFF)
        rounds_a, rounds_b = pd.read_csv(local / name / "rounds.csv"), pd.read_csv(remote / name / "rounds.csv")
        pd.testing.assert_frame_equal(rounds_a, rounds_b, **FRAME_ROUND_OFF)
    pd.testing.assert_frame_equal(pd.read_csv(local / "party_metrics.csv"), pd.read_csv(remote / "party_metrics.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(local / "table1.csv"), pd.read_csv(remote / "table1.csv"))
    traffic = pd.read_csv(remote / "fedamp" / "flower_traffic.csv")
    assert traffic["round"].tolist() == [0, 1] and (traffic["missing"] == 0).all()
    d = np.load(remote / "fedamp" / "models.npz")["global_model"].size
    # FedAMP sends each party its start w_k and its cloud model u_k (one vector when they are equal),
    # FedAvg+ its start and its Fed+ target z_k; each party returns one model (float64, with headers).
    vector = 8 * d
    assert all(3 * vector <= b < 3 * 2.4 * vector for b in traffic["bytes_sent"])
    assert all(3 * vector <= b < 3 * 1.2 * vector for b in traffic["bytes_received"])
    fed_plus = pd.read_csv(remote / "fedavg+" / "flower_traffic.csv")
    assert all(3 * 2 * vector <= b < 3 * 2.4 * vector for b in fed_plus["bytes_sent"])


def test_weights_cross_the_wire_and_a_node_allocates_from_its_own_state(runs) -> None:
    from portfed.deploy import allocate, load_trained_party

    local, remote, grid = runs
    for name in ("fedavg+", "fedamp"):
        # exact with the C kernels (their sums per party do not depend on how many parties an engine holds); with
        # the torch backend a one-party engine's products round differently from the K-party one (ROUND_OFF)
        backend = json.loads((local / name / "run.json").read_text())["backend"]
        exact = {} if backend == "native" else FRAME_ROUND_OFF
        pd.testing.assert_frame_equal(pd.read_csv(local / name / "weights.csv"), pd.read_csv(remote / name / "weights.csv"),
                                      **exact)
    node = next(n for n in grid.nodes.values() if n.index == 1)
    own = load_trained_party(node.deployed_dir, "fedamp", 1)  # the node's disk only: its prices never left it
    server = load_trained_party(remote, "fedamp", 1)
    assert own.tickers == server.tickers
    np.testing.assert_array_equal(own.params, server.params)
    day = server.backtest.index[3]
    np.testing.assert_array_equal(allocate(own, as_of=day).weights, allocate(server, as_of=day).weights)


def test_a_plan_row_crosses_the_wire_bit_for_bit_and_an_equal_vector_once() -> None:
    rng = np.random.default_rng(0)
    start = rng.normal(size=(2, 5))
    plan = CohortPlan(round_index=4, parties=np.array([3, 1]), steps=[2, 7], start=start, target=rng.normal(size=(2, 5)),
                      sigma=[0.25, 0.5], prox_center=start.copy(), prox_coef=[0.1, 0.2], proximal_update="loss")
    content = wire.encode_train(plan, 1, "ab" * 8, committed=2)
    assert sorted(content.array_records["plan"].keys()) == ["start", "target"]
    scalars, got_start, objective = wire.decode_train(content)
    assert (scalars["party"], scalars["steps"], scalars["round"], scalars["committed"]) == (1, 7, 4, 2)
    np.testing.assert_array_equal(got_start, start[1])
    np.testing.assert_array_equal(objective.prox_center, start[1])
    np.testing.assert_array_equal(objective.target, plan.target[1])
    assert (objective.sigma, objective.prox_coef, objective.proximal_update) == (0.5, 0.2, "loss")


def test_flower_runs_equal_the_in_process_runs_with_the_paper_settings(tmp_path: Path) -> None:
    """Raw price ratios, one initial model per party, the Fed+ pull in the loss: each node builds its party
    (and so its own ``w_k^0``, the row the server aggregates into ``w̃^0``) and applies the pull itself."""
    from portfed.experiment.party import build_party, initial_parameters

    path = small_config(tmp_path, algorithms=["fedavg+"], initial_models="per_party", proximal_update="loss")
    raw = yaml.safe_load(path.read_text())
    raw["agent"]["input_scale"] = "raw"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    init = initial_parameters(config)
    for k in range(config.parties.count):
        engine, row = build_party(config, k)[1].engine  # the node's one-party engine
        np.testing.assert_array_equal(engine.parameters()[row], init[k])
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    serve(LoopbackGrid(nodes(path, tmp_path)), str(path), str(tmp_path / "flower"), settings=FAST)
    a, b = np.load(tmp_path / "in_process" / "fedavg+" / "models.npz"), np.load(tmp_path / "flower" / "fedavg+" / "models.npz")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_allclose(a[key], b[key], err_msg=key, **ROUND_OFF)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "in_process" / "table1.csv"),
                                  pd.read_csv(tmp_path / "flower" / "table1.csv"), **FRAME_ROUND_OFF)


def test_nodes_keep_only_the_states_the_server_can_ask_for(runs) -> None:
    _, remote, grid = runs
    node = next(iter(grid.nodes.values()))
    for run in (node.state_dir / "runs").iterdir():
        assert node.saved_rounds(run.name) == [0, 1]  # checkpoint_every 2: round 0 may be asked again


def test_a_silent_node_is_a_missing_reply_and_the_round_goes_on(tmp_path: Path) -> None:
    path = small_config(tmp_path, algorithms=["fedavg"])
    grid = LoopbackGrid(nodes(path, tmp_path))
    silent_node = 1000 + 7 * 1  # party 1
    grid.silent[silent_node, "train"] = 1  # down during round 0, back for round 1
    serve(grid, str(path), str(tmp_path / "out"), settings=FAST)
    quarantine = pd.read_csv(tmp_path / "out" / "fedavg" / "quarantine.csv")
    assert quarantine[["round", "party"]].values.tolist() == [[0, 1]]
    assert "no reply within 1 s" in quarantine["quarantined"].iloc[0]
    rounds = pd.read_csv(tmp_path / "out" / "fedavg" / "rounds.csv")
    assert np.isnan(rounds.query("round == 0 and party == 1")["train_reward"]).all()
    assert np.isfinite(rounds.query("round == 1")["train_reward"]).all()  # it rejoined
    traffic = pd.read_csv(tmp_path / "out" / "fedavg" / "flower_traffic.csv")
    assert traffic["missing"].tolist() == [1, 0]


def test_a_node_of_another_config_or_a_missing_party_is_refused(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    other = yaml.safe_load(path.read_text())
    other["seed"] = 1
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    mixed = nodes(path, tmp_path)
    mixed[1007] = PartyNode(load_config(tmp_path / "other.yaml"), 1, tmp_path / "x")
    with pytest.raises(TimeoutError, match=r"parties \[1\] did not join within 1 s; party 1: node 1007 refused: "
                                           r"the node runs another config"):
        serve(LoopbackGrid(mixed), str(path), str(tmp_path / "a"), settings=FAST)
    partial = nodes(path, tmp_path)
    del partial[1014]
    with pytest.raises(TimeoutError, match=r"parties \[2\] did not join within 1 s$"):
        serve(LoopbackGrid(partial), str(path), str(tmp_path / "b"), settings=FAST)


def test_a_server_that_dies_after_its_nodes_trained_resumes_into_the_uninterrupted_run(tmp_path: Path) -> None:
    # checkpoints after rounds 2 and 4; the link dies once round 3's parties have trained (and saved
    # round 3's state): the resumed server resends rounds 2 and 3, and each node starts them from its
    # newest state *before* the round, not from the orphaned ones.
    path = small_config(tmp_path, algorithms=["fedavg+"], rounds=4)
    serve(LoopbackGrid(nodes(path, tmp_path / "a")), str(path), str(tmp_path / "whole"), settings=FAST)
    crashed = nodes(path, tmp_path / "b")
    with pytest.raises(ConnectionError):
        serve(LoopbackGrid(crashed, crash_on_push=4), str(path), str(tmp_path / "resumed"), settings=FAST)
    node = next(iter(crashed.values()))
    assert node.saved_rounds(next((node.state_dir / "runs").iterdir()).name) == [1, 2, 3]
    serve(LoopbackGrid(crashed), str(path), str(tmp_path / "resumed"), resume=True, settings=FAST)
    whole, resumed = np.load(tmp_path / "whole" / "fedavg+" / "models.npz"), np.load(tmp_path / "resumed" / "fedavg+" / "models.npz")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_array_equal(whole[key], resumed[key], err_msg=key)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "whole" / "fedavg+" / "rounds.csv"),
                                  pd.read_csv(tmp_path / "resumed" / "fedavg+" / "rounds.csv"))


def test_a_node_fits_its_generator_once_and_later_messages_load_it(runs, monkeypatch) -> None:
    _, _, grid = runs

    def no_fit(*args: object) -> None:
        raise AssertionError("a node refitted its generator")

    monkeypatch.setattr("portfed.experiment.party.build._fit_augmenter", no_fit)
    for node in grid.nodes.values():  # a fresh process of the same node: its fit comes from its disk
        fresh = PartyNode(node.config, node.index, node.state_dir)
        reply = fresh.train("f" * 16, 0, None, 0, LocalObjective())
        assert np.isnan(reply.reward) and reply.params.size > 0
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="refitted"):  # the check can fail: a node without its cache fits
        monkeypatch.setattr("portfed.experiment.party.build._fit_augmenter", no_fit)
        PartyNode(node.config, 0, grid.nodes[1007].state_dir.parent / "empty").train("f" * 16, 0, None, 0,
                                                                                     LocalObjective())


def test_the_in_process_engines_do_not_import_flower() -> None:
    code = ("import sys, portfed.cli.main, portfed.experiment.studies.compare, portfed.experiment.runs.federated; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'flwr' or m.startswith('portfed.flower')]")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_known_nodes_need_no_handshake_and_a_wrong_config_is_a_rejected_row(tmp_path: Path, caplog) -> None:
    """With the operator's map a node of another config is found by its train replies: a rejected row
    every round (the others train on); the evaluation, which needs every party, then stops the run."""
    path = small_config(tmp_path, algorithms=["fedavg"])
    known = nodes(path, tmp_path / "a")
    grid = LoopbackGrid(known)
    serve(grid, str(path), str(tmp_path / "a_out"), settings=FAST, nodes={n.index: i for i, n in known.items()})
    assert "query" not in {kind for _, kind in grid.sent}
    other = yaml.safe_load(path.read_text())
    other["agent"]["learning_rate"] = 0.5
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    mixed = nodes(path, tmp_path / "b")
    mixed[1007] = PartyNode(load_config(tmp_path / "other.yaml"), 1, tmp_path / "b" / "other")
    with pytest.raises(RuntimeError, match=r"evaluate: parties without a usable evaluation \(party 1: the node "
                                           r"runs another config"):
        serve(LoopbackGrid(mixed), str(path), str(tmp_path / "b_out"), settings=FAST,
              nodes={n.index: i for i, n in mixed.items()})
    rejected = [r.getMessage() for r in caplog.records if r.name == "portfed.flower.cohort"]
    assert [m.split(":")[0] for m in rejected] == ["round 0", "round 1"]
    assert all("party 1" in m for m in rejected)


def test_a_round_without_any_reply_is_all_rejected_rows_of_the_model_size(tmp_path: Path) -> None:
    """No node answers and the plan names no start (every party continues from its own model): the
    result still has one NaN row of the model's size per party, each rejected with its reason."""
    from portfed.flower.cohort import FlowerCohort
    from portfed.flower.nodes import NodeMap

    path = small_config(tmp_path)
    grid = LoopbackGrid(nodes(path, tmp_path))
    for node in grid.nodes:
        grid.silent[node, "train"] = 1
    n = load_config(path).parties.count
    node_map = NodeMap(grid, n, "0" * 16, FAST, known={k: 1000 + 7 * k for k in range(n)})
    cohort = FlowerCohort(grid, node_map, 171, "ab" * 8, FAST)
    result = cohort.train(CohortPlan(round_index=0, parties=np.arange(n), steps=2, start=None))
    assert result.params.shape == (n, 171) and np.isnan(result.params).all()
    assert [row for row, _ in result.rejected] == list(range(n))
    assert all("no reply within 1 s" in reason for _, reason in result.rejected)


@pytest.mark.parametrize("share", ["actor_critic", "actor"])
def test_flower_runs_equal_the_in_process_runs_with_the_actor_critic(tmp_path: Path, share: str) -> None:
    """Each node trains its actor, critic and target networks in its own engine; the server sees actor ⊕ critic,
    or the actor alone (``share: actor``)."""
    path = small_config(tmp_path, algorithms=["fedavg+"], share=share)
    raw = yaml.safe_load(path.read_text())
    raw["agent"].update({"learner": "actor_critic", "gamma": 0.99})
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    serve(LoopbackGrid(nodes(path, tmp_path)), str(path), str(tmp_path / "flower"), settings=FAST)
    a, b = np.load(tmp_path / "in_process" / "fedavg+" / "models.npz"), np.load(tmp_path / "flower" / "fedavg+" / "models.npz")
    agent = config.agent_config()
    assert a["party_models"].shape == (config.parties.count, row_size(agent) if share == "actor_critic"
                                       else actor_size(agent))
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_allclose(a[key], b[key], err_msg=key, **ROUND_OFF)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "in_process" / "table1.csv"),
                                  pd.read_csv(tmp_path / "flower" / "table1.csv"), **FRAME_ROUND_OFF)
