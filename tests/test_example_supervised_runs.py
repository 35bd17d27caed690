"""examples/supervised_runs.py: ξ statistics and BMTA differences read back from stored supervised runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import supervised_runs  # examples/supervised_runs.py: tests/conftest.py puts examples/ on the path

from portfed.federation import fedamp_weights, make_algorithm
from portfed.supervised.metrics import RunTrace


def _store(out: Path, name: str, algorithm: str, params: dict, seed: int, test: list[float],
           xi: np.ndarray | None) -> None:
    """One stored run as `portfed supervised run` writes it (record + trace), 4 parties, 2 rounds."""
    trace = RunTrace(higher_is_better=True, rounds=[0, len(test) - 1],
                     test=[np.full(4, v) for v in test], val=[np.full(4, v) for v in test], improved=[np.nan],
                     message_weights=xi)
    path = out / "runs" / "row" / algorithm / f"run-seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"row": "row", "algorithm": algorithm, "name": name, "params": params,
                                "seed": seed, "trace": trace.to_dict()}))


def test_fedamp_weights_give_back_the_model_distances_and_the_groups(tmp_path: Path) -> None:
    # two groups of two: clients 0, 1 near the origin, clients 2, 3 near (3, 4) — squared distances 25 apart
    models = np.array([[0.0, 0.0], [0.1, 0.0], [3.0, 4.0], [3.0, 4.1]])
    spec = make_algorithm("fedamp", fedamp_alpha=0.5)
    xi = fedamp_weights(models, alpha=0.5, sigma=spec.attention_scale)
    _store(tmp_path, "fedamp", "FedAMP", {"fedamp_alpha": 0.5}, 0, [0.5, 0.9], xi)
    _store(tmp_path, "fedavg", "FedAvg", {}, 0, [0.5, 0.8], None)  # no ξ: not listed
    table = supervised_runs.weight_table(tmp_path, group_size=2)
    assert table["algorithm"].tolist() == ["FedAMP"]
    squared = ((models[:, None] - models[None]) ** 2).sum(-1)[~np.eye(4, dtype=bool)]
    assert table.loc[0, "sq_dist_min"] == pytest.approx(squared.min(), rel=1e-9)
    assert table.loc[0, "sq_dist_max"] == pytest.approx(squared.max(), rel=1e-9)
    assert table.loc[0, "excess_positive"] == 4 and table.loc[0, "excess_max"] > 0


def test_uniform_weights_show_no_group() -> None:
    xi = np.full((6, 6), 0.1) + np.eye(6) * 0.4
    assert supervised_runs.own_group_excess(xi, 3) == pytest.approx(np.zeros(6), abs=1e-15)
    with pytest.raises(ValueError, match="group_size=4"):
        supervised_runs.own_group_excess(xi, 4)


def test_bmta_differences_pair_the_runs_stored_in_both(tmp_path: Path) -> None:
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    _store(cpu, "fedavg", "FedAvg", {}, 0, [0.5, 0.95], None)
    _store(cpu, "fedavg", "FedAvg", {}, 1, [0.5, 0.94], None)  # only in cpu: left out
    _store(gpu, "fedavg", "FedAvg", {}, 0, [0.5, 0.9432], None)
    diffs = supervised_runs.bmta_differences(cpu, gpu)
    assert diffs["seed"].tolist() == [0]
    assert diffs.loc[0, "difference"] == pytest.approx(95.0 - 94.32)
