"""``portfed flower launch``: a SuperLink and one SuperNode per party on 127.0.0.1, the comparison, and every
process stopped.

The launch directory ``<out>/flower/`` holds the test credentials (:mod:`.certs`; kept, so a
``--resume`` reuses the node keys and the nodes keep their ids), the ``flwr`` configuration
(``FLWR_HOME``, one deployment connection named ``portfed``), each party's node state
(``nodes/party_<k>/``: its training states and fitted generator, :class:`~portfed.flower.node.PartyNode`)
and the processes' logs.  Steps: start the SuperLink (:mod:`.superlink`: the parties' Fleet API on a
listener of its own, the Control and Runtime APIs on the operator's; TLS, SuperNode authentication,
no runtime dependency installation), register every party's public key on the operator's listener,
start the SuperNodes against the parties' listener (the ServerApp waits for them to join), ``flwr run`` the
Flower App of ``flower_app/`` with the run config, follow the run until it ends (the progress bar
reads ``<out>/progress.txt``), save the ServerApp's log, and stop every process it started
(:class:`~.processes.Processes`) — also when it fails or is interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from portfed._io import atomic_write_text
from portfed._progress import progress_bar
from portfed.experiment.config import FederatedConfig, dump_config, load_config
from portfed.experiment.reports import Comparison, load_comparison
from portfed.experiment.runs import config_fingerprint, directory_config_fingerprint, make_spec
from portfed.experiment.runs.run_dir import check_target, read_record
from portfed.flower.certs import Credentials, make_credentials
from portfed.flower.local_noise import check_noise_source
from portfed.flower.nodes import FlowerSettings
from portfed.flower.processes import Processes, free_port, wait_for_port
from portfed.flower.secure import SecAggSettings
from portfed.flower.server import DONE, PROGRESS_FILE, check_private_run, check_secure_run

logger = logging.getLogger(__name__)
APP_DIR = Path(__file__).resolve().parents[2] / "flower_app"
CONNECTION = "portfed"


class InsecureWarning(UserWarning):
    """The federation runs without TLS and node authentication."""


@dataclass
class Launch:
    """A launch on 127.0.0.1 (module docstring): ``insecure`` drops TLS and node authentication;
    ``start_timeout`` bounds each process's start, ``run_timeout`` the whole run (``None``: the
    ServerApp's own time-outs bound it), ``status_interval`` is the seconds between two ``flwr ls``,
    ``stop_grace`` the seconds a process has to stop on SIGTERM before SIGKILL; ``bin_dir`` holds the
    Flower executables; ``secure`` aggregates every round with SecAgg+ (:mod:`.secure`; refused, before
    any process starts, for an algorithm outside the mean family)."""

    config_path: Path
    out: Path
    algorithms: list[str] = field(default_factory=list)
    resume: bool = False
    insecure: bool = False
    settings: FlowerSettings = field(default_factory=FlowerSettings)
    start_timeout: float = 60.0
    run_timeout: float | None = None
    status_interval: float = 10.0
    stop_grace: float = 3.0
    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)
    app_dir: Path = APP_DIR
    secure: SecAggSettings | None = None

    def __post_init__(self) -> None:
        self.config_path, self.out = Path(self.config_path).resolve(), Path(self.out).resolve()
        config = load_config(self.config_path)
        if not isinstance(config, FederatedConfig):
            raise ValueError(f"{self.config_path} is a {config.experiment!r} config; Flower runs federated ones")
        for name in self.algorithms:
            make_spec(config, name)  # a bad name fails here, before any process starts
        if self.secure is not None:
            check_secure_run(config, self.algorithms or list(config.federation.algorithms))
        check_private_run(config, self.algorithms or list(config.federation.algorithms), self.secure)
        self.config = config
        self.prepare_out()
        self.work = self.out / "flower"
        self.control_port, self.fleet_port = free_port(), free_port()  # the operator's and the parties' listeners
        self.env = {**os.environ, "FLWR_HOME": str(self.work / "flwr_home"),
                    "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    # The executors look for a message to run every 0.1 s (Flower's default: 1 s).
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1"}
        self.processes = Processes(self.work / "logs", self.env, grace=self.stop_grace)
        self.node_ids: dict[int, int] = {}  # party → node id, from the registration of its key

    @property
    def parties(self) -> int:
        return self.config.parties.count

    def prepare_out(self) -> None:
        """Check that ``out`` may receive this comparison and, when it holds no run yet, write its
        ``config.yaml`` — before the launch's own folder ``flower/`` appears in it, which the ServerApp's
        claim of ``out`` (:func:`portfed.experiment.runs.claim`) would otherwise take for another run's."""
        names = self.algorithms or list(self.config.federation.algorithms)
        config = self.config.model_copy(update={"federation": self.config.federation.model_copy(
            update={"algorithms": names})})
        check_target(self.out, "comparison", config_fingerprint(config),
                     legacy_fingerprint=directory_config_fingerprint(self.out))
        if read_record(self.out) is None:
            atomic_write_text(self.out / "config.yaml", dump_config(config))

    def credentials(self) -> Credentials | None:
        """The test credentials (made on the first launch into ``out``), or ``None`` when insecure."""
        if self.insecure:
            warnings.warn("insecure launch: no TLS and no SuperNode authentication — for a trial on one "
                          "machine only", InsecureWarning, stacklevel=2)
            return None
        credentials = Credentials(self.work / "credentials")
        if not credentials.directory.exists():
            return make_credentials(credentials.directory, self.parties)
        if credentials.missing(self.parties):
            raise FileNotFoundError(f"{credentials.directory} lacks {[str(p) for p in credentials.missing(self.parties)]}")
        return credentials

    def flwr(self, *args: str, timeout: float = 60.0) -> dict[str, object]:
        """``flwr ARGS --format json``'s answer (``RuntimeError`` with its output when it fails).

        A ``flwr`` process that has printed its whole answer but not exited within ``timeout`` is killed and
        its answer used: measured on a loaded 2-core machine, ``flwr ls`` printed the run's status and then
        hung past 60 s, which failed a launch whose run was going well.  No answer within ``timeout`` is a
        ``subprocess.TimeoutExpired``.
        """
        command = [str(self.bin_dir / "flwr"), *args, "--format", "json"]
        try:
            done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
            text, code, error = done.stdout, done.returncode, done.stderr
        except subprocess.TimeoutExpired as expired:  # subprocess.run has killed it
            text = _text(expired.stdout)
            if _answer(text) is None:
                raise
            code, error = 0, _text(expired.stderr)
        answer = _answer(text)
        if code != 0 or answer is None or answer.get("success") is False:
            raise RuntimeError(f"flwr {' '.join(args)} failed (code {code}):\n{text}\n{error}")
        return answer

    def write_connection(self, credentials: Credentials | None) -> None:
        """``$FLWR_HOME/config.toml``: the deployment connection ``portfed`` to this launch's SuperLink."""
        home = self.work / "flwr_home"
        home.mkdir(parents=True, exist_ok=True)
        tls = "insecure = true" if credentials is None else f'root-certificates = "{credentials.ca}"'
        (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                          f'address = "127.0.0.1:{self.control_port}"\n{tls}\n')

    def superlink_args(self, credentials: Credentials | None) -> list[str]:
        """The SuperLink's command line: :mod:`.superlink` with the operator's listener on
        ``control_port`` and the parties' (Fleet API only) on ``fleet_port``, both on 127.0.0.1."""
        args = [sys.executable, "-m", "portfed.flower.superlink", "--host", "127.0.0.1", "--port",
                str(self.control_port), "--fleet-host", "127.0.0.1", "--fleet-port", str(self.fleet_port),
                "--disable-runtime-dependency-installation"]
        if credentials is None:
            return [*args, "--insecure"]
        return [*args, "--ssl-ca-certfile", str(credentials.ca), "--ssl-certfile", str(credentials.server_certificate),
                "--ssl-keyfile", str(credentials.server_key), "--enable-supernode-auth"]

    def start_superlink(self, credentials: Credentials | None) -> None:
        process = self.processes.start("superlink", self.superlink_args(credentials), cwd=self.work)
        for port in (self.control_port, self.fleet_port):
            wait_for_port(port, self.start_timeout, process, self.processes.log("superlink"))

    def supernode_args(self, party: int, credentials: Credentials | None) -> list[str]:
        """The command line of party ``party``'s SuperNode (what ``portfed flower supernode`` runs)."""
        return supernode_command(self.bin_dir, party, f"127.0.0.1:{self.fleet_port}", self.config_path,
                                 self.work / "nodes" / f"party_{party}", free_port(),
                                 None if credentials is None else credentials.ca,
                                 None if credentials is None else credentials.node_key(party))

    def start_supernode(self, party: int, credentials: Credentials | None) -> None:
        self.processes.start(f"supernode_{party}", self.supernode_args(party, credentials), cwd=self.work)

    def register(self, credentials: Credentials) -> None:
        """Register every party's public key with the SuperLink (concurrently: each ``flwr`` call is a
        process start); the node ids it gives go to the ServerApp, which then needs no handshake."""
        with ThreadPoolExecutor(4) as pool:
            answers = pool.map(lambda k: self.flwr("supernode", "register", str(credentials.node_public_key(k)),
                                                   CONNECTION), range(self.parties))
            for k, answer in enumerate(answers):
                self.node_ids[k] = int(answer["node-id"])  # type: ignore[call-overload]

    def submit(self) -> int:
        """``flwr run`` the app with the run config; the run id."""
        s = self.settings
        run_config = {"config": str(self.config_path), "out": str(self.out), "algorithms": ",".join(self.algorithms),
                      "resume": self.resume, "poll-interval": s.poll_interval, "reply-timeout": s.reply_timeout,
                      "query-timeout": s.query_timeout, "join-timeout": s.join_timeout,
                      "nodes": ",".join(f"{k}:{n}" for k, n in self.node_ids.items()),
                      "secure-aggregation": self.secure is not None,
                      "secagg-clipping-range": (self.secure or SecAggSettings()).clipping_range}
        text = " ".join(f"{k}={json.dumps(v)}" for k, v in run_config.items())
        return int(self.flwr("run", str(self.app_dir), CONNECTION, "--run-config", text)["run-id"])  # type: ignore[call-overload]

    def status(self, run_id: int) -> str:
        """Run ``run_id``'s status as ``flwr ls`` reports it (e.g. ``running``, ``finished:completed``)."""
        return str(self.flwr("ls", "--run-id", str(run_id), CONNECTION)["runs"][0]["status"])  # type: ignore[index]

    def wait_run(self, run_id: int, progress: bool) -> str:
        """Follow run ``run_id`` until it ends (its final status) or ``run_timeout`` passes.

        The progress bar follows ``<out>/progress.txt`` (read every 0.5 s); ``flwr ls`` — a process
        start, seconds of CPU — is asked every ``status_interval`` seconds, and at once when the
        ServerApp has written that it is done.
        """
        names = self.algorithms or self.config.federation.algorithms
        rounds = self.config.federation.rounds
        deadline = None if self.run_timeout is None else time.monotonic() + self.run_timeout
        done, status, asked = 0, "", -float("inf")
        marker_path = self.out / PROGRESS_FILE
        marker_path.unlink(missing_ok=True)
        with progress_bar("Flower rounds", total=len(names) * rounds, enabled=progress) as advance:
            while deadline is None or time.monotonic() < deadline:
                marker = marker_path.read_text().split() if marker_path.exists() else []
                if len(marker) == 3 and marker[0] in names:
                    now = names.index(marker[0]) * rounds + int(marker[1])
                    advance(max(0, now - done))
                    done = max(done, now)
                finished = marker == [DONE]
                if finished or time.monotonic() - asked >= self.status_interval:
                    status, asked = self.status(run_id), time.monotonic()
                    if status.startswith("finished"):
                        return status
                time.sleep(0.5)
        raise TimeoutError(f"run {run_id} did not finish within {self.run_timeout:g} s (status {status!r})")

    def save_server_log(self, run_id: int) -> Path:
        """The ServerApp's log (``flwr log``) into the launch's logs."""
        path = self.processes.log("serverapp")
        done = subprocess.run([str(self.bin_dir / "flwr"), "log", str(run_id), CONNECTION, "--show"], env=self.env,
                              capture_output=True, text=True, timeout=60, check=False)
        path.write_text(done.stdout + done.stderr)
        return path


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def _answer(text: str) -> dict[str, object] | None:
    """The JSON object ``flwr --format json`` printed (from its first ``{``), or ``None`` if incomplete."""
    try:
        answer = json.loads(text[text.index("{"):])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def supernode_command(bin_dir: Path, party: int, superlink: str, config: Path, state_dir: Path, port: int,
                      root_certificates: Path | None, auth_key: Path | None, dp_noise: str = "secret") -> list[str]:
    """``flower-supernode`` for party ``party``: its node config names the party, its config and state dir (and
    ``dp-noise`` when not the default ``secret``, :mod:`.local_noise`); TLS and node authentication unless
    ``root_certificates`` and ``auth_key`` are ``None`` (insecure)."""
    node_config = f'party={int(party)} config="{Path(config).resolve()}" state-dir="{Path(state_dir).resolve()}"'
    if check_noise_source(dp_noise) != "secret":
        node_config += f' dp-noise="{dp_noise}"'
    args = [str(bin_dir / "flower-supernode"), "--superlink", superlink, "--node-config", node_config,
            "--port", str(port)]
    if root_certificates is None or auth_key is None:
        return [*args, "--insecure"]
    return [*args, "--root-certificates", str(root_certificates), "--auth-supernode-private-key", str(auth_key)]


def launch(launcher: Launch, progress: bool = True) -> Comparison:
    """Run ``launcher``'s comparison on a local deployment and read its directory back (module docstring).

    Raises:
        RuntimeError: the run did not complete (the message points at the ServerApp's log).
        TimeoutError: a process did not start, or the run did not end, in time.
    """
    credentials = launcher.credentials()
    launcher.write_connection(credentials)
    with launcher.processes:
        launcher.start_superlink(credentials)
        if credentials is not None:
            launcher.register(credentials)
        for k in range(launcher.parties):  # the ServerApp waits for them to join (join-timeout)
            launcher.start_supernode(k, credentials)
        run_id = launcher.submit()
        status = launcher.wait_run(run_id, progress)
        log = launcher.save_server_log(run_id)
    if status != "finished:completed":
        raise RuntimeError(f"the Flower run ended {status!r}; the ServerApp's log is {log}")
    return load_comparison(launcher.out)
