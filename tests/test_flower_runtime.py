"""portfed on Flower's real deployment runtime: a SuperLink and three SuperNodes on 127.0.0.1 with TLS and
SuperNode authentication (``portfed flower launch``).  Both tests are in ``make test-slow``: on the 2-core
machine a launch starts Python processes that import torch (measured 16–19 s each on 2026-11-25) and
the first test's run took 424 s there, and more than its 600 s budget in a second attempt beside another
job (all four training rounds done, the evaluation exchange not); it took ~105 s on an idle machine.

The first test runs two rounds of FedAvg+ and FedAMP and checks the final models equal the in-process
run's for the same seed to float32 round-off (each node trains its party in a one-party engine, the
in-process run all parties in one engine: the products sum in another order); the second kills a
SuperNode during a round.  Every test checks that no process it started is left: each launched
process (and every descendant) carries the launch's ``FLWR_HOME`` in its environment.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import yaml

pytest.importorskip("flwr")

from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.runs import load_checkpoint  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.flower.launch import Launch, launch  # noqa: E402
from portfed.flower.nodes import FlowerSettings  # noqa: E402

ROOT = Path(__file__).parents[1]


def flower_config(tmp_path: Path, algorithms: list[str], rounds: int) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": rounds, "local_steps": 3, "algorithms": algorithms,
                              "checkpoint_every": 1})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    path = tmp_path / "flower.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def leftovers(home: Path) -> list[psutil.Process]:
    """The processes whose environment names ``home`` as FLWR_HOME (a launch's processes and their children)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("FLWR_HOME") == str(home):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def reap(launcher: Launch) -> None:
    """Kill every process left by ``launcher`` (by its id) and fail the test if there was one."""
    left = leftovers(launcher.work / "flwr_home")
    for process in left:
        process.kill()
    assert not left, f"processes left behind: {[p.cmdline()[:3] for p in left]}"


# Failed on 2026-11-25 because `flwr ls` printed the run's status and then hung past its 60 s time-out
# (fixed in Launch.flwr, unit-tested in tests/test_flower_cli.py in the default run).
@pytest.mark.slow
@pytest.mark.timeout(700)
def test_three_supernodes_with_tls_and_node_auth_train_the_in_process_models(tmp_path: Path) -> None:
    path = flower_config(tmp_path, ["fedavg+", "fedamp"], rounds=2)
    compare(load_config(path), tmp_path / "in_process", progress=False, n_jobs=1)
    launcher = Launch(path, tmp_path / "flower", settings=FlowerSettings(reply_timeout=120.0, join_timeout=120.0),
                      run_timeout=600.0)
    try:
        result = launch(launcher, progress=False)
    finally:
        reap(launcher)
    for name in ("fedavg+", "fedamp"):
        local, remote = np.load(tmp_path / "in_process" / name / "models.npz"), np.load(tmp_path / "flower" / name / "models.npz")
        for key in ("party_models", "global_model", "deployed"):
            np.testing.assert_allclose(local[key], remote[key], err_msg=f"{name}: {key}", atol=1e-6, rtol=0)
    assert list(result.table.index) == ["fedavg+", "fedamp", "UCRP", "UBAH"]
    # TLS and SuperNode authentication were on (each log starts with its command line).
    superlink = launcher.processes.log("superlink").read_text().splitlines()[0]
    assert "--ssl-certfile" in superlink and "--enable-supernode-auth" in superlink
    for k in range(3):
        node = launcher.processes.log(f"supernode_{k}").read_text().splitlines()[0]
        assert "--root-certificates" in node and "--auth-supernode-private-key" in node and "--insecure" not in node


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_supernode_is_a_missing_reply_and_rejoins_with_its_state(tmp_path: Path) -> None:
    path = flower_config(tmp_path, ["fedavg"], rounds=8)
    launcher = Launch(path, tmp_path / "flower", settings=FlowerSettings(reply_timeout=30.0, join_timeout=60.0),
                      run_timeout=480.0)
    victim = "supernode_1"
    restarted = threading.Event()

    def kill_and_restart() -> None:
        """Kill party 1's SuperNode once round 0 is done, restart it when the SuperLink lets it in."""
        progress = launcher.out / "progress.txt"
        while not (progress.exists() and progress.read_text().split()[:2] == ["fedavg", "1"]):
            time.sleep(0.2)
        time.sleep(1.0)  # round 1's messages are out
        launcher.processes.kill(victim)
        deadline = time.monotonic() + 150
        log = launcher.processes.log(victim)
        while time.monotonic() < deadline:  # refused until the SuperLink has marked the node offline (~40-60 s)
            seen = log.stat().st_size
            process = launcher.processes.start(victim, launcher.supernode_args(1, launcher.credentials()))
            # Joined when it logs its node id; refused when it exits (a loaded machine can take more than
            # 10 s to start a SuperNode, so "still running" says nothing).
            while process.poll() is None and time.monotonic() < deadline:
                if b"SuperNode ID:" in log.read_bytes()[seen:]:
                    restarted.set()
                    return
                time.sleep(0.5)
            time.sleep(3)

    watcher = threading.Thread(target=kill_and_restart, daemon=True)
    watcher.start()
    try:
        launch(launcher, progress=False)
    finally:
        reap(launcher)
    assert restarted.is_set()
    quarantine = pd.read_csv(launcher.out / "fedavg" / "quarantine.csv")
    assert 1 in quarantine["party"].tolist()
    assert "no reply" in quarantine["quarantined"].iloc[0] or "node error" in quarantine["quarantined"].iloc[0]
    rounds = pd.read_csv(launcher.out / "fedavg" / "rounds.csv").query("party == 1")
    trained = int(np.isfinite(rounds["train_reward"]).sum())
    assert np.isfinite(rounds.query("round == 7")["train_reward"]).all()  # it rejoined
    # ... with its state: its trainer counts every local step since round 0 (3 per round it trained;
    # one more round when the killed node's ClientApp finished round 1's training before dying).
    last = next((launcher.work / "nodes" / "party_1" / "runs").rglob("round_000007.pt"))
    steps = int(load_checkpoint(last, last.parent.parent.name)["trainer"]["step"])
    assert steps in (3 * trained, 3 * (trained + 1)) and trained < 8
