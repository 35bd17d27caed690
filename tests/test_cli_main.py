"""The ``portfed`` command itself: a fast ``--help`` (no torch), ``--version``, every command loadable."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from portfed.cli.main import COMMANDS, app

HEAVY = ("torch", "pandas", "matplotlib", "portfed.experiment", "portfed.data")


def _modules_after(args: list[str]) -> set[str]:
    code = (f"import sys\nfrom portfed.cli.main import app\ntry:\n    app({args!r}, prog_name='portfed')\n"
            "except SystemExit:\n    pass\nprint('MODULES', ' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_no_torch(args):
    modules = _modules_after(args)
    assert "portfed.cli.main" in modules
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert heavy == []


def test_version_prints_the_installed_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"portfed {version('portfed')}"


def test_help_lists_every_command():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    listed = [line.split()[1] for line in result.output.splitlines() if line.startswith("│ ") and len(line.split()) > 2]
    assert [name for name in listed if name in COMMANDS] == list(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_loads_and_has_help(name):
    result = CliRunner().invoke(app, [name, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_an_unknown_command_is_named():
    result = CliRunner().invoke(app, ["frobnicate"])
    assert result.exit_code == 2
    assert "frobnicate" in result.output


def test_run_and_compare_share_the_default_run_directory():
    from pathlib import Path

    from portfed.cli.compare_cmd import default_out

    assert default_out(Path("configs/tiny.yaml"), None) == Path("runs/tiny")
    assert default_out(Path("configs/tiny.yaml"), Path("elsewhere")) == Path("elsewhere")


def test_run_refuses_algorithms_on_a_single_party_config(tmp_path):
    config = tmp_path / "one.yaml"
    config.write_text("experiment: single_party\n")
    result = CliRunner().invoke(app, ["run", str(config), "--algorithms", "fedavg", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "--algorithms applies to federated configs only" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("words", [["study", "collapse"], ["data", "list"], ["supervised", "list"],
                                   ["flower", "launch"]])
def test_sub_commands_stay_sub_commands(words):
    """A group of one command must not turn into that command (``study collapse CONFIG``)."""
    result = CliRunner().invoke(app, [*words, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"portfed {' '.join(words)}" in result.output
