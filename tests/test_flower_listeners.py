"""The SuperLink's two listeners (:mod:`portfed.flower.superlink`): the parties' answers the Fleet API only.

The filter and the launch's command line are checked in the default suite; one real SuperLink on
127.0.0.1 (``make test-slow``: it starts Python processes that import flwr, and a SuperNode) shows the
outcome: an outsider's ``flwr supernode register`` and ``flwr run`` refused on the parties' port while
the operator's port serves them, and a SuperNode whose key is not registered refused.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from test_flower_runtime import reap  # noqa: E402

from portfed.flower.certs import make_credentials  # noqa: E402
from portfed.flower.launch import APP_DIR, CONNECTION, Launch, supernode_command  # noqa: E402
from portfed.flower.processes import free_port  # noqa: E402
from portfed.flower.superlink import FleetOnly, fleet_paths, is_loopback, parse  # noqa: E402

ROOT = Path(__file__).parents[1]


def status_of(path: str, scope_type: str = "http") -> tuple[int | None, list[str]]:
    """What :class:`FleetOnly` answers a request for ``path``: its status (``None``: passed to the app)."""
    reached: list[str] = []
    sent: list[dict] = []

    async def app(scope, receive, send) -> None:
        reached.append(scope["path"])

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message) -> None:
        sent.append(message)

    asyncio.run(FleetOnly(app, fleet_paths())({"type": scope_type, "path": path}, receive, send))
    starts = [m["status"] for m in sent if m["type"] == "http.response.start"]
    return (starts[0] if starts else None), reached


def test_the_parties_listener_passes_the_fleet_api_only() -> None:
    paths = fleet_paths()
    assert {"/v1/fleet/register-node", "/v1/fleet/pull-messages", "/v1/fleet/get-fab"} <= paths
    assert all(p.startswith("/v1/fleet/") for p in paths)
    assert status_of("/v1/fleet/pull-messages") == (None, ["/v1/fleet/pull-messages"])
    for path in ("/v1/control/start-run", "/v1/control/register-node", "/v1/runtime/pull-task-input",
                 "/v1/fleet/../control/start-run", "/v1/fleet/pull-messages/", "/docs", "/health", "/"):
        assert status_of(path) == (404, []), path
    assert status_of("/v1/fleet/pull-messages", "websocket")[1] == []


def test_the_launch_starts_the_superlink_with_two_listeners(tmp_path: Path) -> None:
    launcher = Launch(ROOT / "configs" / "tiny.yaml", tmp_path / "out")
    credentials = make_credentials(tmp_path / "c", 1)
    args = launcher.superlink_args(credentials)
    assert args[1:3] == ["-m", "portfed.flower.superlink"]
    assert args[args.index("--port") + 1] == str(launcher.control_port)
    assert args[args.index("--fleet-port") + 1] == str(launcher.fleet_port) != str(launcher.control_port)
    assert args[args.index("--host") + 1] == args[args.index("--fleet-host") + 1] == "127.0.0.1"
    assert f"127.0.0.1:{launcher.fleet_port}" in launcher.supernode_args(0, credentials)
    launcher.write_connection(credentials)
    assert f'address = "127.0.0.1:{launcher.control_port}"' in (launcher.work / "flwr_home" / "config.toml").read_text()
    ours, rest = parse(["--fleet-host", "0.0.0.0", "--ssl-certfile", "s.pem"])
    assert (ours.fleet_host, ours.fleet_port) == ("0.0.0.0", 9092)
    assert rest == ["--ssl-certfile", "s.pem", "--host", "127.0.0.1", "--port", "9091"]
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.5", "link.example")] \
        == [True, True, True, True, False, False, False]


def test_portfed_flower_superlink_passes_every_option_on(monkeypatch) -> None:
    from typer.testing import CliRunner

    from portfed.cli.main import app

    started: list[list[str]] = []
    monkeypatch.setattr("portfed.cli.flower_cmd.os.execv", lambda path, args: started.append(args))
    result = CliRunner().invoke(app, ["flower", "superlink", "--fleet-host", "0.0.0.0", "--fleet-port", "9092",
                                      "--ssl-certfile", "s.pem", "--enable-supernode-auth"])
    assert result.exit_code == 0, result.output
    assert started[0][1:] == ["-m", "portfed.flower.superlink", "--fleet-host", "0.0.0.0", "--fleet-port", "9092",
                              "--ssl-certfile", "s.pem", "--enable-supernode-auth"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_an_outsider_is_refused_on_the_parties_port_and_an_unregistered_node_by_the_superlink(tmp_path: Path) -> None:
    launcher = Launch(ROOT / "configs" / "tiny.yaml", tmp_path / "out", start_timeout=120.0)
    credentials = launcher.credentials()
    assert credentials is not None
    launcher.write_connection(credentials)
    # The outsider has the public CA certificate and the parties' address, and a key pair of its own.
    outsider = make_credentials(tmp_path / "outsider", 1)
    with (launcher.work / "flwr_home" / "config.toml").open("a") as config:
        config.write(f'\n[superlink.outsider]\naddress = "127.0.0.1:{launcher.fleet_port}"\n'
                     f'root-certificates = "{credentials.ca}"\n')
    try:
        with launcher.processes:
            launcher.start_superlink(credentials)
            with pytest.raises(RuntimeError, match="404 Not Found"):
                launcher.flwr("supernode", "register", str(outsider.node_public_key(0)), "outsider", timeout=120)
            with pytest.raises(RuntimeError, match="404 Not Found"):
                launcher.flwr("run", str(APP_DIR), "outsider", "--run-config", 'config="/x" out="/y"', timeout=120)
            # The operator's listener serves the same request (so the refusal above is the listener's).
            node_id = launcher.flwr("supernode", "register", str(credentials.node_public_key(0)), CONNECTION,
                                    timeout=120)["node-id"]
            stranger = launcher.processes.start("stranger", supernode_command(
                launcher.bin_dir, 0, f"127.0.0.1:{launcher.fleet_port}", launcher.config_path, tmp_path / "s",
                free_port(), credentials.ca, outsider.node_key(0)))
            registered = launcher.processes.start("supernode_0", launcher.supernode_args(0, credentials))
            assert stranger.wait(timeout=180) != 0  # flwr's SUPERNODE_CONNECTION_ERROR: its key is not registered
            assert "Exit Code: 305" in launcher.processes.log("stranger").read_text()
            deadline = time.monotonic() + 120
            log = launcher.processes.log("supernode_0")
            while f"SuperNode ID: {node_id}" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(1.0)
            assert f"SuperNode ID: {node_id}" in log.read_text() and registered.poll() is None
            assert "No SuperNode found with the given public key" in launcher.processes.log("superlink").read_text()
    finally:
        reap(launcher)
