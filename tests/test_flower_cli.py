"""``portfed flower``: credentials, argument checks and the launch's process handling (no runtime needed)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key  # noqa: E402

from portfed.cli.main import app  # noqa: E402
from portfed.flower.certs import make_credentials  # noqa: E402
from portfed.flower.launch import Launch, supernode_command  # noqa: E402
from portfed.flower.processes import Processes  # noqa: E402

runner = CliRunner()
ROOT = Path(__file__).parents[1]


def test_credentials_are_a_ca_a_server_certificate_for_the_hosts_and_one_key_pair_per_party(tmp_path: Path) -> None:
    result = runner.invoke(app, ["flower", "credentials", str(tmp_path / "c"), "--parties", "2",
                                 "--host", "10.0.0.5", "--host", "link.example"])
    assert result.exit_code == 0, result.output
    made = tmp_path / "c"
    server = x509.load_pem_x509_certificate((made / "server.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((made / "ca.crt").read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    assert names.get_values_for_type(x509.DNSName) == ["link.example"]
    for k in range(2):
        private = load_ssh_private_key((made / f"party_{k}").read_bytes(), password=None)
        public = load_ssh_public_key((made / f"party_{k}.pub").read_bytes())
        assert private.public_key().public_numbers() == public.public_numbers()
        assert (made / f"party_{k}").stat().st_mode & 0o077 == 0
    again = runner.invoke(app, ["flower", "credentials", str(made), "--parties", "2"])
    assert again.exit_code == 1 and "never overwritten" in again.output


def test_bad_credentials_requests_write_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="parties"):
        make_credentials(tmp_path / "c", 0)
    with pytest.raises(ValueError, match="hosts"):
        make_credentials(tmp_path / "c", 1, hosts=())
    assert list(tmp_path.iterdir()) == []


def test_supernode_needs_credentials_or_insecure_and_a_real_party(tmp_path: Path) -> None:
    config = ROOT / "configs" / "tiny.yaml"
    base = ["flower", "supernode", "--superlink", "127.0.0.1:9", "--config", str(config)]
    neither = runner.invoke(app, [*base, "--party", "0"])
    assert neither.exit_code == 1 and "--insecure" in neither.output
    half = runner.invoke(app, [*base, "--party", "0", "--root-certificates", str(config)])
    assert half.exit_code == 1 and "--auth-key" in half.output
    missing = runner.invoke(app, [*base, "--party", "3", "--insecure"])
    assert missing.exit_code == 1 and "--party 3" in missing.output


def test_the_supernode_command_names_the_party_its_config_and_its_state(tmp_path: Path) -> None:
    args = supernode_command(Path("/bin"), 2, "host:9092", tmp_path / "c.yaml", tmp_path / "s", 9100,
                             tmp_path / "ca.crt", tmp_path / "party_2")
    assert args[args.index("--node-config") + 1] == f'party=2 config="{tmp_path / "c.yaml"}" state-dir="{tmp_path / "s"}"'
    assert args[-4:] == ["--root-certificates", str(tmp_path / "ca.crt"), "--auth-supernode-private-key",
                         str(tmp_path / "party_2")]
    assert supernode_command(Path("/bin"), 2, "h:1", tmp_path, tmp_path, 1, None, None)[-1] == "--insecure"
    seeded = supernode_command(Path("/bin"), 2, "h:1", tmp_path, tmp_path, 1, None, None, "run")
    assert seeded[seeded.index("--node-config") + 1].endswith(' dp-noise="run"')  # local-DP noise of the run's seed
    refused = runner.invoke(app, ["flower", "supernode", "--party", "0", "--superlink", "h:1", "--config",
                                  str(ROOT / "configs" / "tiny.yaml"), "--insecure", "--dp-noise", "seed"])
    assert refused.exit_code == 1 and "dp-noise must be one of secret, run, got 'seed'" in refused.output


def test_launch_refuses_a_config_that_is_not_federated(tmp_path: Path) -> None:
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump({"experiment": "single_party"}))
    result = runner.invoke(app, ["flower", "launch", str(single), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "federated" in result.output
    unknown = runner.invoke(app, ["flower", "launch", str(ROOT / "configs" / "tiny.yaml"), "--out",
                                  str(tmp_path / "out"), "-a", "fedavg,nope"])
    assert unknown.exit_code == 1 and "nope" in unknown.output
    assert not (tmp_path / "out").exists()


def test_stopping_a_launch_stops_whole_process_trees_also_escaped_ones_and_orphans(tmp_path: Path) -> None:
    # A parent whose child starts a new session (as the SuperLink starts its executor) and waits.
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
              "start_new_session=True); time.sleep(60)")
    processes = Processes(tmp_path / "logs", env={}, grace=2.0)
    with processes:
        parents = [processes.start(f"p{i}", [sys.executable, "-c", script]) for i in range(2)]
        time.sleep(1.5)
        tree = [m for p in parents for m in [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]]
        assert len(tree) == 4
        processes.kill("p0")  # a crash: p0's child is left running, an orphan
        assert parents[0].poll() is not None and tree[1].is_running()
    assert not any(m.is_running() and m.status() != psutil.STATUS_ZOMBIE for m in tree)
    assert (tmp_path / "logs" / "p1.log").read_text().startswith(sys.executable)


def test_a_flwr_cli_that_answers_and_hangs_is_killed_and_its_answer_used(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "flwr"
    fake.write_text('#!/bin/sh\nif [ "$1" = ls ]; then echo \'{"success": true, "runs": [{"status": "running"}]}\'; '
                    'fi\nexec sleep 30\n')
    fake.chmod(0o755)
    launcher = Launch(ROOT / "configs" / "tiny.yaml", tmp_path / "out", bin_dir=bin_dir)
    started = time.monotonic()
    assert launcher.flwr("ls", timeout=2.0)["runs"] == [{"status": "running"}]
    with pytest.raises(subprocess.TimeoutExpired):  # no answer at all: still a time-out
        launcher.flwr("run", timeout=2.0)
    assert time.monotonic() - started < 20


def test_what_an_exited_process_left_in_its_group_is_stopped_also_after_a_restart(tmp_path: Path) -> None:
    # A parent that starts a child in its own process group and exits at once, as a refused SuperNode
    # leaves its executor; it is restarted under the same name (a SuperNode tried again).
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "sys.exit(1)")
    processes = Processes(tmp_path / "logs", env={}, grace=2.0)
    with processes:
        children = []
        for _ in range(2):
            parent = processes.start("node", [sys.executable, "-c", script])
            parent.wait(timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                found = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in {c.pid for c in children}
                         and "time.sleep(60)" in " ".join(p.info["cmdline"] or []) and os.getpgid(p.pid) == parent.pid]
                if found:
                    children += found
                    break
                time.sleep(0.1)
        assert len(children) == 2 and all(c.is_running() for c in children)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
