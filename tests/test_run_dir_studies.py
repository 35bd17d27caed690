"""One run per directory for tuning, seed comparisons and studies: a second writer refused, another
request refused, the same request resumable."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from portfed.experiment.config import parse_config
from portfed.experiment.runs.run_dir import RunDirError, locked, read_record
from portfed.experiment.studies import compare_seeds, tune

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
LAM_T = "federation.algorithm_params.fedavg+.lam_t"


def _config():
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"rounds": 2, "local_steps": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    return parse_config(raw)


def test_a_tuning_directory_is_locked_recorded_and_refuses_another_grid(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    with locked(out), pytest.raises(RunDirError, match="being written by another portfed run"):
        tune(_config(), LAM_T, [0.1, 0.5], [0], out, progress=False)
    assert not (out / "chosen.json").exists()
    tune(_config(), LAM_T, [0.1, 0.5], [0], out, progress=False)
    record = read_record(out)
    assert (record["kind"], record["status"]) == ("tune", "finished")
    with pytest.raises(RunDirError, match="another config"):
        tune(_config(), LAM_T, [0.1, 0.9], [0], out, progress=False)  # value_1 would mean another value
    tune(_config(), LAM_T, [0.1, 0.5], [0], out, progress=False, resume=True)  # the same request resumes


def test_a_seed_comparison_records_its_directory_and_refuses_another_config(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    config = _config()
    compare_seeds(config, out, [0], ["local"], progress=False)
    assert read_record(out)["kind"] == "seeds" and read_record(out / "seed_0")["kind"] == "comparison"
    other = config.model_copy(update={"agent": {**config.agent, "learning_rate": 0.002}})
    with pytest.raises(RunDirError, match="another config"):
        compare_seeds(other, out, [0], ["local"], progress=False)
