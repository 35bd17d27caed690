"""``--executor local|ray --address``: every sweep command takes them and hands its study the executor;
bad combinations are one line.  (The Ray runs themselves: ``tests/test_ray_executor.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import portfed.experiment.studies as studies
import portfed.supervised.runner as supervised_runner
from portfed.cli.main import app
from portfed.ray_executor import ClusterError, RayExecutor

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
SUPERVISED = str(ROOT / "configs" / "supervised" / "fedplus_synthetic.yaml")

#: command line (without the executor options) → (where its sweep starts, the keyword naming the executor)
COMMANDS = {
    "run": (["run", TINY], studies, "compare", "n_jobs"),
    "compare": (["compare", TINY], studies, "compare", "n_jobs"),
    "compare --seeds": (["compare", TINY, "--seeds", "0,1"], studies, "compare_seeds", "n_jobs"),
    "tune": (["tune", TINY, "--key", "agent.learning_rate", "--grid", "0.1,0.01", "--algorithm", "fedavg"],
             studies, "tune", "n_jobs"),
    "study collapse": (["study", "collapse", str(ROOT / "configs" / "study_collapse.yaml")], studies,
                       "run_collapse_study", "jobs"),
    "walk-forward": (["walk-forward", TINY], studies, "walk_forward", "n_jobs"),
    "supervised run": (["supervised", "run", SUPERVISED], supervised_runner, "Runner", "jobs"),
}


def invoke_stopped(command: str, tmp_path: Path, monkeypatch, *options: str):
    """Run ``command`` with ``--jobs 3`` and ``options``, its study replaced by one that records its keyword
    arguments and stops; the CLI's result, those arguments and the keyword that carries the executor."""
    args, module, name, keyword = COMMANDS[command]
    seen = {}

    def stop(*_, **kwargs):
        seen.update(kwargs)
        raise ClusterError("the sweep would start here")

    monkeypatch.setattr(module, name, stop)
    # Ray counts as installed (the cluster extra is CI's second stage): the executor is made, never started
    monkeypatch.setattr("portfed.cli.executor_options.find_spec", lambda spec: object() if spec == "ray" else None)
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--jobs", "3", *options])
    return result, seen, keyword


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_sweep_command_hands_its_study_the_ray_executor(command: str, tmp_path: Path, monkeypatch) -> None:
    result, seen, keyword = invoke_stopped(command, tmp_path, monkeypatch, "--executor", "ray", "--address", "head:6379")
    assert result.exit_code == 1 and "the sweep would start here" in result.output, result.output
    assert seen[keyword] == RayExecutor("head:6379", 3)


@pytest.mark.parametrize("command", ["compare", "study collapse"])
def test_the_local_executor_is_the_default_and_takes_jobs(command: str, tmp_path: Path, monkeypatch) -> None:
    result, seen, keyword = invoke_stopped(command, tmp_path, monkeypatch)
    assert result.exit_code == 1 and seen[keyword] == 3


@pytest.mark.parametrize(("options", "message"), [
    (["--executor", "ray"], "--executor ray needs --address"),
    (["--address", "127.0.0.1:6379"], "--address 127.0.0.1:6379 applies to --executor ray only"),
    (["--executor", "slurm"], "--executor 'slurm': choose one of local, ray"),
])
@pytest.mark.parametrize("command", ["compare", "tune", "study collapse", "walk-forward"])
def test_bad_executor_options_are_one_line(command: str, options: list[str], message: str, tmp_path: Path) -> None:
    args = COMMANDS[command][0]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), *options])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_without_ray_the_command_says_how_to_install_it_before_any_work(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("portfed.cli.executor_options.find_spec", lambda name: None)
    result = CliRunner().invoke(app, ["compare", TINY, "--out", str(tmp_path / "out"), "--executor", "ray",
                                      "--address", "head:6379"])
    assert result.exit_code == 1 and not (tmp_path / "out").exists()
    assert "--executor ray needs Ray, which is not installed: pip install 'portfed[cluster]'" in result.output


def test_a_supervised_config_on_a_gpu_is_not_sent_to_the_cluster(tmp_path: Path) -> None:
    cnn = str(ROOT / "configs" / "supervised" / "fedamp_practical_cnn.yaml")
    result = CliRunner().invoke(app, ["supervised", "run", cnn, "--out", str(tmp_path / "out"),
                                      "--device", "cuda", "--executor", "ray", "--address", "head:6379"])
    assert result.exit_code == 1 and "--executor ray trains on the nodes' CPUs" in result.output
