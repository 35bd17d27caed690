"""One run per directory: checks before any write, a lock against a second writer, ``run.json`` records."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.experiment.config import parse_config
from portfed.experiment.runs import CheckpointError, RunDirError, run_dir
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


def _raw(**federation: object) -> dict:
    raw = copy.deepcopy(TINY)
    raw["parties"].update(generators=[None], generator_params={})
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2, **federation})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    return raw


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_finished_comparison_records_itself_and_every_sub_run(tmp_path: Path) -> None:
    config = parse_config(_raw())
    compare(config, tmp_path, progress=False)
    top = run_dir.read_record(tmp_path)
    assert top["status"] == "finished" and top["kind"] == "comparison" and top["ended"]
    assert top["fingerprint"] == run_dir.config_fingerprint(config) and top["algorithms"] == ["fedavg"]
    sub = run_dir.read_record(tmp_path / "fedavg")
    assert sub["status"] == "finished" and sub["algorithm"] == "fedavg" and sub["config"] == top["fingerprint"]
    assert run_dir.check_run(tmp_path, top["fingerprint"]) == top
    # The same config (more rounds, other algorithms) may write into it again; another config may not.
    compare(parse_config(_raw(rounds=3, algorithms=["local"])), tmp_path, progress=False)
    changed = _raw()
    changed["agent"]["learning_rate"] = 5e-4
    before = _files(tmp_path)
    with pytest.raises(RunDirError, match="another config.*--force"):
        compare(parse_config(changed), tmp_path, progress=False)
    assert _files(tmp_path) == before
    compare(parse_config(changed), tmp_path, progress=False, force=True)
    # The forced run keeps the old sub-run of `local`, which readers now refuse as another config's.
    with pytest.raises(RunDirError, match="another config"):
        run_dir.check_sub_run(tmp_path / "local", "local", run_dir.config_fingerprint(parse_config(changed)),
                              run_dir.read_record(tmp_path))


def test_a_refused_resume_leaves_the_directory_unchanged(tmp_path: Path) -> None:
    compare(parse_config(_raw()), tmp_path, progress=False)
    before = _files(tmp_path)
    # Same directory fingerprint (rounds may grow), but another checkpoint fingerprint: local_steps.
    changed = _raw(local_steps=5)
    with pytest.raises(CheckpointError, match="another config"):
        compare(parse_config(changed), tmp_path, resume=True, progress=False, force=True)
    assert _files(tmp_path) == before  # config.yaml, parties.csv and run.json untouched
    config_path = tmp_path.parent / f"{tmp_path.name}.yaml"
    config_path.write_text(yaml.safe_dump(changed))
    result = CliRunner().invoke(app, ["run", str(config_path), "--out", str(tmp_path), "--resume", "-q"])
    assert result.exit_code == 1 and "another config" in result.output, result.output
    assert _files(tmp_path) == before


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from portfed.experiment.runs.run_dir import locked
            with locked({str(tmp_path)!r}):
                print("locked", flush=True)
                sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match="being written by another portfed run"):
            compare(parse_config(_raw()), tmp_path, progress=False)
        assert not (tmp_path / "config.yaml").exists()
        config_path = tmp_path.parent / f"{tmp_path.name}.yaml"
        config_path.write_text(yaml.safe_dump(_raw()))
        result = CliRunner().invoke(app, ["run", str(config_path), "--out", str(tmp_path), "-q"])
        assert result.exit_code == 1 and "being written by another portfed run" in result.output
        assert "Traceback" not in result.output
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, yet the kernel drops the lock with the process
        holder.communicate(timeout=30)
    assert holder.returncode == -9
    compare(parse_config(_raw()), tmp_path, progress=False)


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    config_path = tmp_path / "c.yaml"
    config_path.write_text(yaml.safe_dump(_raw()))
    target = tmp_path / "afile"
    target.write_text("x")
    result = CliRunner().invoke(app, ["run", str(config_path), "--out", str(target), "-q"])
    assert result.exit_code == 1 and "is a file" in result.output and str(target) in result.output
    assert len(result.output.strip().splitlines()) == 1 and target.read_text() == "x"


def test_a_directory_of_other_files_is_refused_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not empty.*notes.txt"):
        compare(parse_config(_raw()), tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    compare(parse_config(_raw()), tmp_path, progress=False, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine" and run_dir.read_record(tmp_path)["status"] == "finished"


def test_a_failed_or_interrupted_run_says_so_and_stale_temporaries_go(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir(parents=True)
    stale = tmp_path / "sub" / ".table1.csv.abc.tmp"
    stale.write_text("torn")
    with pytest.raises(ZeroDivisionError), run_dir.claim(tmp_path, "comparison", "f", force=True):
        assert not stale.exists()
        assert run_dir.read_record(tmp_path)["status"] == "running"
        raise ZeroDivisionError
    assert run_dir.read_record(tmp_path)["status"] == "failed"
    with pytest.raises(KeyboardInterrupt), run_dir.claim(tmp_path, "comparison", "f"):
        raise KeyboardInterrupt
    assert run_dir.read_record(tmp_path)["status"] == "interrupted"
    with pytest.raises(RunDirError, match="interrupted, not finished"):
        run_dir.check_run(tmp_path, "f")
    with pytest.raises(RunDirError, match="not the config"):
        run_dir.check_run(tmp_path, "g")
    record = json.loads((tmp_path / "run.json").read_text())
    record["status"] = "running"
    (tmp_path / "run.json").write_text(json.dumps(record))
    with pytest.raises(RunDirError, match="no process holds its lock"):
        run_dir.check_run(tmp_path, "f")


def test_a_resumed_run_adds_the_seconds_of_its_earlier_legs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``elapsed_seconds`` sums the legs of one run: a resumed leg carries the ended legs' seconds (and a
    leg killed outright, still ``running``, passes on only what it had carried); a fresh run starts at 0."""
    clock = iter(["2026-01-01T00:00:00+00:00", "2026-01-01T00:01:40+00:00",  # leg 1: 100 s
                  "2026-01-01T01:00:00+00:00",                               # leg 2: killed outright
                  "2026-01-01T02:00:00+00:00", "2026-01-01T02:00:30+00:00",  # leg 3: 30 s
                  "2026-01-01T03:00:00+00:00", "2026-01-01T03:00:05+00:00",  # a fresh run: 5 s
                  "2026-01-01T04:00:00+00:00"])
    monkeypatch.setattr(run_dir, "_now", lambda: next(clock))
    run_dir.write_record(tmp_path, "algorithm", "f")
    run_dir.end_record(tmp_path, "interrupted")
    assert run_dir.read_record(tmp_path)["elapsed_seconds"] == 100.0
    run_dir.write_record(tmp_path, "algorithm", "f", resumed=True)
    assert run_dir.read_record(tmp_path)["earlier_seconds"] == 100.0
    run_dir.write_record(tmp_path, "algorithm", "f", resumed=True)
    run_dir.end_record(tmp_path, "finished")
    assert run_dir.read_record(tmp_path)["elapsed_seconds"] == 130.0
    run_dir.write_record(tmp_path, "algorithm", "f")
    run_dir.end_record(tmp_path, "finished")
    assert run_dir.read_record(tmp_path)["elapsed_seconds"] == 5.0
    assert run_dir.write_record(tmp_path / "x", "algorithm", "g", resumed=True)["earlier_seconds"] == 0.0


def test_a_directory_without_run_json_is_read_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(run_dir.LegacyRunWarning, match="no run.json"):
        assert run_dir.check_run(tmp_path, "f") is None
    assert run_dir.check_sub_run(tmp_path / "fedavg", "fedavg", "f", None) is None
    with pytest.raises(RunDirError, match="no run.json"):
        run_dir.check_sub_run(tmp_path / "fedavg", "fedavg", "f", {"status": "finished"})


def test_walk_forward_refuses_a_directory_of_another_run(tmp_path: Path) -> None:
    from portfed.experiment.studies import walk_forward

    run_dir.write_record(tmp_path, "comparison", "another", status="finished")
    with pytest.raises(RunDirError, match="holds a comparison run of another config"):
        walk_forward(parse_config(_raw()), tmp_path, 2, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
