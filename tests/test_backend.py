"""``agent.backend`` in a run: refused when unknown, out of the fingerprint when ``auto``, recorded in ``run.json``,
warned about when a resumed run resolves to another backend (portfed.agents.backend)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.experiment.config import ConfigError, dump_config, parse_config
from portfed.experiment.runs import config_fingerprint, run_fingerprint
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


def _raw(**agent: object) -> dict:
    raw = copy.deepcopy(TINY)
    raw["agent"].update(agent)
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 1, "checkpoint_every": 1})
    raw["diagnostics"]["interpolation_rounds"] = [0]
    return raw


def test_backend_auto_keeps_the_fingerprints_and_another_backend_changes_them() -> None:
    plain, auto, torch_ = (parse_config(_raw(**extra)) for extra in ({}, {"backend": "auto"}, {"backend": "torch"}))
    assert "backend" not in TINY["agent"]  # configs written before the key existed
    assert config_fingerprint(auto) == config_fingerprint(plain) != config_fingerprint(torch_)
    assert run_fingerprint(auto, "fedavg") == run_fingerprint(plain, "fedavg") != run_fingerprint(torch_, "fedavg")
    assert "backend" not in yaml.safe_load(dump_config(auto))["agent"]  # auto: the default, not stored
    assert yaml.safe_load(dump_config(torch_))["agent"]["backend"] == "torch"


def test_capture_none_keeps_the_fingerprints_and_a_capture_changes_them() -> None:
    plain, none, compiled = (parse_config(_raw(**extra)) for extra in ({}, {"capture": "none"}, {"capture": "compile"}))
    assert "capture" not in TINY["agent"]  # configs written before the key existed
    assert config_fingerprint(none) == config_fingerprint(plain) != config_fingerprint(compiled)
    assert "capture" not in yaml.safe_load(dump_config(none))["agent"]
    assert yaml.safe_load(dump_config(compiled))["agent"]["capture"] == "compile"
    with pytest.raises(ConfigError, match="capture 'compile' records the PyTorch step, not the C kernels of backend "
                                          "'native'"):
        parse_config(_raw(capture="compile", backend="native"))


def test_an_unknown_backend_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="backend must be one of .*'auto', 'torch', 'native'.* got 'gpu'"):
        parse_config(_raw(backend="gpu"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_raw()))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q",
                                      "--set", "agent.backend=cuda"])
    assert result.exit_code == 1 and "got 'cuda'" in result.output and "Traceback" not in result.output


def test_backend_native_without_a_compiler_is_one_line_and_writes_nothing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from portfed.agents import native

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PORTFED_NATIVE", raising=False)
    native._library.cache_clear()
    try:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(_raw(backend="native")))
        out = tmp_path / "out"
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "-q"])
    finally:
        native._library.cache_clear()
    assert result.exit_code == 1, result.output
    assert "agent.backend native: the C kernels cannot be built" in result.output and "no-such-cc" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_a_run_records_its_backend_and_a_resume_on_another_one_warns(tmp_path: Path, backend: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    raw = _raw(backend=backend)
    with caplog.at_level(logging.INFO, logger="portfed.experiment.runs.federated"):
        compare(parse_config(raw), tmp_path, progress=False, n_jobs=1)
    record = json.loads((tmp_path / "fedavg" / "run.json").read_text())
    assert record["backend"] == backend and f"fedavg: training on the {backend} backend" in caplog.text
    assert "resuming on the" not in caplog.text
    other = {"torch": "native", "native": "torch"}[backend]  # as if the rounds so far ran on the other one
    (tmp_path / "fedavg" / "run.json").write_text(json.dumps({**record, "backend": other}))
    raw["federation"]["rounds"] = 2
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="portfed.experiment.runs.federated"):
        compare(parse_config(raw), tmp_path, resume=True, progress=False, n_jobs=1)
    assert f"fedavg: resuming on the {backend} backend a run trained on the {other} backend" in caplog.text
    assert json.loads((tmp_path / "fedavg" / "run.json").read_text())["backend"] == backend
