"""Secure aggregation (Flower's SecAgg+) on the Flower engine: three nodes, each answering through portfed's
real ClientApp (Flower's ``secaggplus_mod`` included) with its own Flower context, over an in-process
grid; the refusals of the rules SecAgg+ cannot serve; and (slow: a launch takes minutes on the 2-core
machine) a real SuperLink and three SuperNodes on 127.0.0.1 with TLS and node authentication."""

from __future__ import annotations

import copy
import itertools
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")

from flower_loopback import Error, LoopbackGrid, Metadata, Reply  # noqa: E402
from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402
from test_flower_engine import FAST, nodes, small_config  # noqa: E402
from test_flower_runtime import flower_config, reap  # noqa: E402

from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.party import initial_parameters  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402
from portfed.flower.cohort import FlowerCohort  # noqa: E402
from portfed.flower.launch import Launch, launch  # noqa: E402
from portfed.flower.node import config_digest  # noqa: E402
from portfed.flower.nodes import FlowerSettings, NodeMap  # noqa: E402
from portfed.flower.secure import SecAggSettings, check_secure  # noqa: E402
from portfed.flower.server import serve  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "flower_app"))
from portfed_app.client_app import app  # noqa: E402


@dataclass
class AppGrid:
    """Node id → the Flower context of a SuperNode running portfed's ClientApp (its ``state`` persists
    between messages, as a SuperNode keeps it); every message is answered at once by ``app``.
    ``fail``: node ids whose ClientApp raises on a SecAgg+ message of that stage."""

    contexts: dict[int, Context]
    fail: dict[int, str] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)
    _replies: dict[str, Reply] = field(default_factory=dict)

    def __post_init__(self) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = []
        for message in messages:
            mid, node = f"m{next(self._ids)}", message.metadata.dst_node_id
            ids.append(mid)
            stage = message.content.config_records.get("secaggplus_configs", {}).get("stage")
            try:
                if stage is not None and self.fail.get(node) == stage:
                    raise RuntimeError(f"node {node} failed at {stage}")
                content = app(copy.deepcopy(message), self.contexts[node]).content  # as if serialised
                self._replies[mid] = Reply(Metadata(mid, node), content)
            except Exception as error:  # a ClientApp's exception reaches the server as an error reply
                self._replies[mid] = Reply(Metadata(mid, node), RecordDict(), Error(0, repr(error)))
        return ids

    def pull_messages(self, message_ids: list[str]) -> list[Reply]:
        return [self._replies.pop(mid) for mid in message_ids if mid in self._replies]


def app_grid(path: Path, root: Path, **node_config: str) -> AppGrid:
    config = load_config(path)
    return AppGrid({1000 + 7 * k: Context(1, 1000 + 7 * k, {"party": k, "config": str(path),
                                                             "state-dir": str(root / f"node_{k}"), **node_config},
                                          RecordDict(), {})
                    for k in range(config.parties.count)})


def cohort(grid: object, path: Path, secure: SecAggSettings | None) -> FlowerCohort:
    config = load_config(path)
    n = config.parties.count
    node_map = NodeMap(grid, n, config_digest(config), FAST, known={k: 1000 + 7 * k for k in range(n)})  # type: ignore[arg-type]
    return FlowerCohort(grid, node_map, initial_parameters(config).shape[-1], "ab" * 8, FAST, secure)  # type: ignore[arg-type]


def plan(path: Path) -> CohortPlan:
    config = load_config(path)
    start = np.tile(initial_parameters(config), (config.parties.count, 1))
    return CohortPlan(round_index=0, parties=np.arange(config.parties.count), steps=3, start=start)


def test_three_nodes_secure_mean_equals_the_plain_mean_within_the_quantisation(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    settings = SecAggSettings()
    plain = cohort(LoopbackGrid(nodes(path, tmp_path / "plain")), path, None).train(plan(path))
    secure_cohort = cohort(app_grid(path, tmp_path / "secure"), path, settings)
    result = secure_cohort.train(plan(path))
    assert not plain.rejected and not result.rejected
    mean = plain.params.mean(axis=0)
    assert np.ptp(plain.params, axis=0).max() > 100 * settings.step  # the parties differ: a mean to hide
    for row in result.params:  # every contributing row is the secure mean, never a party's own model
        np.testing.assert_array_equal(row, result.params[0])
    error = np.abs(result.params[0] - mean).max()
    assert 0 < error < settings.step, error  # quantised (not the plain vectors), within one step Δ = 2c/Q
    np.testing.assert_allclose(result.train_reward, plain.train_reward, rtol=0, atol=1e-12)
    assert secure_cohort.traffic[0].bytes_received > 0
    again = cohort(app_grid(path, tmp_path / "again"), path, settings).train(plan(path))
    np.testing.assert_array_equal(again.params, result.params)  # the rounding is seeded: the same run, the same bits


def test_a_node_lost_before_its_masked_vector_is_a_rejected_row_and_one_lost_after_is_in_the_mean(
        tmp_path: Path) -> None:
    path = small_config(tmp_path)
    step = SecAggSettings().step
    plain = cohort(LoopbackGrid(nodes(path, tmp_path / "plain")), path, None).train(plan(path))
    grid = app_grid(path, tmp_path / "before")
    grid.fail = {1000: "collect_masked_vectors"}  # its pairwise masks are rebuilt from the shares of its key
    result = cohort(grid, path, SecAggSettings()).train(plan(path))
    assert [row for row, _ in result.rejected] == [0] and "collect_masked_vectors" in result.rejected[0][1]
    np.testing.assert_allclose(result.params[1], plain.params[1:].mean(axis=0), rtol=0, atol=step)
    grid = app_grid(path, tmp_path / "after")
    grid.fail = {1007: "unmask"}  # its private mask is removed with the others' shares of its seed
    result = cohort(grid, path, SecAggSettings()).train(plan(path))
    assert not result.rejected
    np.testing.assert_allclose(result.params[1], plain.params.mean(axis=0), rtol=0, atol=step)


def test_a_parameter_outside_the_clipping_range_is_refused_not_clipped(tmp_path: Path) -> None:
    path = small_config(tmp_path)
    result = cohort(app_grid(path, tmp_path), path, SecAggSettings(clipping_range=1e-3)).train(plan(path))
    assert len(result.rejected) == 3 and np.isnan(result.params).all()
    assert any("outside SecAgg+'s clipping range" in reason for _, reason in result.rejected)


@pytest.mark.parametrize("name", ["comed", "fedcomed+", "fedgeomed+", "rfa"])
def test_median_rules_are_refused_naming_why(name: str) -> None:
    with pytest.raises(ValueError, match="a median is not a function of the sum"):
        check_secure(name)


@pytest.mark.parametrize("name", ["fedavg+", "fedmgda+", "fedamp"])
def test_rules_needing_each_party_model_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="SecAgg\\+ lets the server learn only the sum"):
        check_secure(name)


def test_the_launcher_refuses_a_median_before_any_process_or_file(tmp_path: Path) -> None:
    path = small_config(tmp_path, algorithms=["fedavg", "comed"])
    with pytest.raises(ValueError, match="refuses 'comed': a median is not a function of the sum"):
        Launch(path, tmp_path / "out", secure=SecAggSettings())
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="refuses federation.screen_factor"):
        Launch(small_config(tmp_path, algorithms=["fedavg"], screen_factor=3.0), tmp_path / "out", secure=SecAggSettings())
    with pytest.raises(ValueError, match="sums 2 … 255 parties a round, the config has 1"):
        Launch(small_config(tmp_path, algorithms=["fedavg"], parties_per_round=1), tmp_path / "out", secure=SecAggSettings())
    assert not (tmp_path / "out").exists()


def test_a_secure_fedavg_run_on_the_flower_engine_and_a_refused_median(tmp_path: Path) -> None:
    path = small_config(tmp_path, algorithms=["fedavg"])
    with pytest.raises(ValueError, match="refuses 'comed'"):
        serve(app_grid(path, tmp_path / "x"), str(path), str(tmp_path / "refused"), ["comed"], settings=FAST,
              secure=SecAggSettings())
    assert not (tmp_path / "refused").exists()
    serve(LoopbackGrid(nodes(path, tmp_path / "plain")), str(path), str(tmp_path / "plain_run"), settings=FAST)
    serve(app_grid(path, tmp_path / "secure"), str(path), str(tmp_path / "secure_run"), settings=FAST,
          secure=SecAggSettings())
    plain, secure = (np.load(tmp_path / run / "fedavg" / "models.npz") for run in ("plain_run", "secure_run"))
    # Two rounds: round 0's quantisation error (< Δ) moves round 1's start, and round 1 adds its own
    # (measured 8.5e-7 on the global model, Δ = 9.5e-7).
    np.testing.assert_allclose(secure["global_model"], plain["global_model"], rtol=0, atol=2 * SecAggSettings().step)
    assert (tmp_path / "secure_run" / "secure_aggregation.json").read_text() == json.dumps(asdict(SecAggSettings()))
    with pytest.raises(ValueError, match="would mix two aggregations"):
        serve(LoopbackGrid(nodes(path, tmp_path / "secure2")), str(path), str(tmp_path / "secure_run"),
              resume=True, settings=FAST)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_three_supernodes_aggregate_securely_to_the_in_process_mean(tmp_path: Path) -> None:
    path = flower_config(tmp_path, ["fedavg"], rounds=2)
    compare(load_config(path), tmp_path / "in_process", progress=False, n_jobs=1)
    launcher = Launch(path, tmp_path / "flower", settings=FlowerSettings(reply_timeout=120.0, join_timeout=120.0),
                      run_timeout=800.0, secure=SecAggSettings())
    try:
        launch(launcher, progress=False)
    finally:
        reap(launcher)
    local, remote = (np.load(tmp_path / run / "fedavg" / "models.npz") for run in ("in_process", "flower"))
    # float32 round-off of the one-party engines (1e-6, tests/test_flower_runtime.py) and two rounds' quantisation
    np.testing.assert_allclose(remote["global_model"], local["global_model"], rtol=0, atol=1e-6 + 2 * SecAggSettings().step)
    np.testing.assert_array_equal(remote["party_models"], np.tile(remote["party_models"][0], (3, 1)))  # only the mean
    traffic = pd.read_csv(tmp_path / "flower" / "fedavg" / "flower_traffic.csv")
    assert (traffic["missing"] == 0).all() and (traffic["bytes_received"] > 0).all()
