"""Kill a federated run with SIGKILL after its first checkpoint, resume it, get the uninterrupted result."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.experiment.config import parse_config
from portfed.experiment.runs import (
    CHECKPOINT_NAME,
    CheckpointError,
    RunDirError,
    load_checkpoint,
    run_fingerprint,
)
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ALGORITHMS = ["fedavg", "fedavg+"]


def _config(network: str = "cnn") -> dict:
    raw = copy.deepcopy(TINY)
    # Long enough that the kill lands mid-run: 30 rounds, a checkpoint every 2.
    raw["federation"].update({"algorithms": ALGORITHMS, "rounds": 30, "checkpoint_every": 2})
    raw["agent"]["network"] = network
    raw["diagnostics"]["interpolation_rounds"] = [1, 29]
    return raw


def _assert_same_run(a: Path, b: Path) -> None:
    pd.testing.assert_frame_equal(pd.read_csv(a / "table1.csv"), pd.read_csv(b / "table1.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(a / "party_metrics.csv"), pd.read_csv(b / "party_metrics.csv"))
    for name in ALGORITHMS:
        for csv in ("rounds.csv", "interpolation.csv", "portfolio_values.csv"):
            pd.testing.assert_frame_equal(pd.read_csv(a / name / csv), pd.read_csv(b / name / csv))
        with np.load(a / name / "models.npz") as x, np.load(b / name / "models.npz") as y:
            for key in ("party_models", "global_model", "deployed"):
                np.testing.assert_array_equal(x[key], y[key])


# The CNN in make test, the RNN in CI's second stage (make test-extended): each about 12 s.
@pytest.mark.parametrize("network", ["cnn", pytest.param("rnn", marks=pytest.mark.extended)])
def test_sigkill_then_resume_gives_the_uninterrupted_result(tmp_path: Path, network: str) -> None:
    raw = _config(network)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    reference = tmp_path / "reference"
    compare(parse_config(raw), reference, progress=False)

    interrupted = tmp_path / "interrupted"
    checkpoint = interrupted / ALGORITHMS[0] / CHECKPOINT_NAME
    portfed = Path(sys.executable).parent / "portfed"  # the venv's console script
    command = [str(portfed), "run", str(config_path), "--out", str(interrupted), "-q", "--jobs", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists():
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    saved = torch.load(checkpoint, weights_only=False)
    assert 2 <= saved["federation"]["round_index"] < raw["federation"]["rounds"]  # killed mid-way
    assert not (interrupted / "table1.csv").exists()

    result = CliRunner().invoke(app, ["run", str(config_path), "--out", str(interrupted), "--resume", "-q",
                                      "--jobs", "1"])
    assert result.exit_code == 0, result.output
    _assert_same_run(reference, interrupted)


@pytest.mark.parametrize("share", ["actor_critic", "actor"])
def test_an_actor_critic_run_resumed_from_its_checkpoint_is_bit_exact(tmp_path: Path, share: str) -> None:
    """The checkpoint carries each party's critic, target networks, both Adam states and exploration generator."""
    raw = _config()
    raw["agent"].update({"learner": "actor_critic", "gamma": 0.99})
    raw["federation"].update({"rounds": 4, "checkpoint_every": 2, "share": share})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    compare(parse_config(raw), tmp_path / "straight", progress=False)
    half = copy.deepcopy(raw)
    half["federation"]["rounds"] = 2
    compare(parse_config(half), tmp_path / "resumed", progress=False)
    saved = torch.load(tmp_path / "resumed" / "fedavg" / CHECKPOINT_NAME, weights_only=False)
    assert {"critic_adam", "targets", "noise"} <= set(saved["parties"][0]["trainer"])
    compare(parse_config(raw), tmp_path / "resumed", resume=True, progress=False)
    _assert_same_run(tmp_path / "straight", tmp_path / "resumed")


def test_resume_refuses_a_checkpoint_of_another_config(tmp_path: Path) -> None:
    raw = _config()
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    compare(parse_config(raw), tmp_path, progress=False)
    changed = copy.deepcopy(raw)
    changed["federation"]["local_steps"] = 5
    with pytest.raises(RunDirError, match="another config"):  # the directory is another config's
        compare(parse_config(changed), tmp_path, resume=True, progress=False)
    with pytest.raises(CheckpointError, match="another config"):  # and so is the checkpoint, --force or not
        compare(parse_config(changed), tmp_path, resume=True, progress=False, force=True)
    # Raising the number of rounds keeps the fingerprint: a finished run can be continued.
    longer = copy.deepcopy(raw)
    longer["federation"]["rounds"] = 3
    assert run_fingerprint(parse_config(longer), "fedavg") == run_fingerprint(parse_config(raw), "fedavg")
    with pytest.raises(CheckpointError, match="another config"):
        load_checkpoint(tmp_path / "fedavg" / CHECKPOINT_NAME, run_fingerprint(parse_config(raw), "fedavg+"))


def test_a_fresh_run_replaces_an_old_checkpoint(tmp_path: Path) -> None:
    raw = _config()
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    compare(parse_config(raw), tmp_path, progress=False)
    changed = copy.deepcopy(raw)
    changed["federation"]["local_steps"] = 5
    with pytest.raises(RunDirError, match="another config"):  # one run per directory
        compare(parse_config(changed), tmp_path, progress=False)
    compare(parse_config(changed), tmp_path, progress=False, force=True)  # no --resume: starts over
    saved = load_checkpoint(tmp_path / "fedavg" / CHECKPOINT_NAME, run_fingerprint(parse_config(changed), "fedavg"))
    assert saved["federation"]["round_index"] == 2


def _kill_at(point: str, tmp_path: Path, jobs: int = 1) -> None:
    """Run the CLI with a crash point, check it died by SIGKILL, resume, compare with an uninterrupted run.

    With ``jobs > 1`` the crash point kills a worker process: the comparison stops with an error
    (the pool is broken) and ``--resume`` continues every algorithm from its last checkpoint."""
    raw = _config()
    raw["federation"].update({"rounds": 8, "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1, 7]
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    reference = tmp_path / "reference"
    compare(parse_config(raw), reference, progress=False)
    interrupted = tmp_path / "interrupted"
    portfed = Path(sys.executable).parent / "portfed"
    env = {**os.environ, "PORTFED_CRASH_AT": point}
    done = subprocess.run([str(portfed), "run", str(config_path), "--out", str(interrupted), "-q", "--jobs", str(jobs)],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    if jobs == 1:
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    else:
        assert done.returncode != 0 and b"terminated abruptly" in done.stderr, done.stderr.decode()
    assert not (interrupted / "table1.csv").exists()
    assert not list(interrupted.rglob("*.tmp")) or point.startswith("checkpoint_write")  # only the torn write
    result = CliRunner().invoke(app, ["run", str(config_path), "--out", str(interrupted), "--resume", "-q",
                                      "--jobs", str(jobs)])
    assert result.exit_code == 0, result.output
    _assert_same_run(reference, interrupted)


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_kill_during_a_checkpoint_write_then_resume_is_exact(tmp_path: Path) -> None:
    _kill_at("checkpoint_write:2", tmp_path)


@pytest.mark.slow
def test_a_killed_parallel_comparison_resumes_exactly(tmp_path: Path) -> None:
    _kill_at("local_train:7", tmp_path, jobs=2)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["local_train:7", "checkpoint_write:3", "evaluation:1"])
def test_kill_at_three_points_then_resume_is_exact(tmp_path: Path, point: str) -> None:
    _kill_at(point, tmp_path)


def test_a_tampered_or_truncated_checkpoint_is_refused_without_running_code(tmp_path: Path) -> None:
    raw = _config()
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    compare(parse_config(raw), tmp_path, progress=False)
    path = tmp_path / "fedavg" / CHECKPOINT_NAME
    fingerprint = run_fingerprint(parse_config(raw), "fedavg")
    assert load_checkpoint(path, fingerprint)["federation"]["round_index"] == 2
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path, fingerprint)

    class Payload:  # an object whose unpickling would run code
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    torch.save({"format": 2, "fingerprint": fingerprint, "x": Payload()}, path)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path, fingerprint)
    assert not (tmp_path / "pwned").exists()
