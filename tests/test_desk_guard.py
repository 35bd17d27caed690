"""The desk never trades on a bad number: a blown-up, unfinished or mismatched model writes nothing."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.deploy import RunDirectoryError, load_trained_party
from portfed.deploy.allocate import check_target_weights
from portfed.deploy.errors import TargetWeightsError
from portfed.experiment.config import parse_config
from portfed.experiment.runs import RUN_FILE, LegacyRunWarning
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> Path:
    """FedAvg under a ×1e200 party: its deployed models are not finite (the issue's ×1e6 FedAvg+ in 2 rounds)."""
    raw = copy.deepcopy(TINY)
    raw["parties"].update(generators=[None], generator_params={},
                          faults=[{"kind": "scale", "parties": [2], "factor": 1e200}])
    raw["federation"].update({"algorithms": ["fedavg", "local"], "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    out = tmp_path_factory.mktemp("attacked")
    compare(parse_config(raw), out, progress=False)
    return out


def _allocate(run: Path, algorithm: str, out: Path) -> object:
    return CliRunner().invoke(app, ["allocate", str(run), "-a", algorithm, "-p", "0", "--out", str(out)])


def test_allocate_on_a_non_finite_deployed_model_exits_non_zero_and_writes_nothing(attacked: Path,
                                                                                   tmp_path: Path) -> None:
    with np.load(attacked / "fedavg" / "models.npz") as models:  # beyond float32: inf in the network
        assert np.abs(models["deployed"][0]).max() > np.finfo(np.float32).max
    result = _allocate(attacked, "fedavg", tmp_path / "alloc")
    assert result.exit_code == 1 and "not finite" in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "alloc").exists()
    planted = tmp_path / "planted"  # a NaN deployed model, planted in an honest run
    shutil.copytree(attacked, planted)
    with np.load(planted / "local" / "models.npz") as models:
        arrays = dict(models)
    arrays["deployed"][0, :] = np.nan
    np.savez(planted / "local" / "models.npz", **arrays)
    result = _allocate(planted, "local", tmp_path / "alloc")
    assert result.exit_code == 1 and "non-finite entries" in result.output, result.output  # refused on load
    assert not (tmp_path / "alloc").exists()
    exported = CliRunner().invoke(app, ["export", str(attacked), "-a", "fedavg", "-p", "0", "--out",
                                        str(tmp_path / "export")])
    assert exported.exit_code == 1 and "not finite" in exported.output and not (tmp_path / "export").exists()
    good = _allocate(attacked, "local", tmp_path / "alloc")  # the same run's honest model still allocates
    assert good.exit_code == 0, good.output
    blocker = tmp_path / "blocker"  # an --out under a file: the OS error is one line naming it
    blocker.write_text("x")
    blocked = _allocate(attacked, "local", blocker / "sub")
    assert blocked.exit_code == 1 and "Traceback" not in blocked.output
    assert blocked.output.strip().splitlines()[-1] == f"error: Not a directory: {blocker / 'sub'}"
    (written,) = (tmp_path / "alloc").glob("*.json")
    weights = json.loads(written.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))["weights"]
    assert sum(weights.values()) == pytest.approx(1.0)


def test_target_weights_must_be_finite_non_negative_and_sum_to_one() -> None:
    assets = ["cash", "A", "B"]
    np.testing.assert_array_equal(check_target_weights(np.array([0.2, 0.3, 0.5]), assets), [0.2, 0.3, 0.5])
    for bad, match in (([np.nan, 0.5, 0.5], r"not finite for \['cash'\]"), ([0.0, np.inf, 0.0], r"\['A'\]"),
                       ([1.2, -0.2, 0.0], r"negative for \['A'\]"), ([0.2, 0.2, 0.2], "sum to"),
                       ([0.5, 0.5], "3 assets")):
        with pytest.raises(TargetWeightsError, match=match):
            check_target_weights(np.array(bad), assets)


def test_an_unfinished_or_overwritten_run_is_refused(attacked: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(attacked, run)
    record = json.loads((run / "local" / RUN_FILE).read_text())
    (run / "local" / RUN_FILE).write_text(json.dumps({**record, "status": "interrupted"}))
    with pytest.raises(RunDirectoryError, match="'local'.*interrupted, not finished"):
        load_trained_party(run, "local", 0)
    result = _allocate(run, "local", tmp_path / "alloc")
    assert result.exit_code == 1 and "not finished" in result.output and not (tmp_path / "alloc").exists()
    (run / "local" / RUN_FILE).write_text(json.dumps(record))
    load_trained_party(run, "local", 0)
    # Another run's config.yaml over this run's models: refused, not applied to other tickers.
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["seed"] = 7
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(RunDirectoryError, match="not the config its run.json records"):
        load_trained_party(run, "local", 0)


def test_a_legacy_directory_is_read_with_a_warning_but_not_when_unfinished(attacked: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(attacked, run)
    for record in run.rglob(RUN_FILE):
        record.unlink()
    with pytest.warns(LegacyRunWarning):
        assert load_trained_party(run, "local", 0).backtest is not None
    (run / "local" / "weights.csv").unlink()
    with pytest.raises(RunDirectoryError, match="no weights.csv"), pytest.warns(LegacyRunWarning):
        load_trained_party(run, "local", 0)
