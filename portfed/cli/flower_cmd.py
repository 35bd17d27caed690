"""``portfed flower``: the federation on Flower's deployment runtime (docs/flower.md).

* ``portfed flower launch CONFIG --out DIR`` — a SuperLink and one SuperNode per party on 127.0.0.1,
  the comparison, Table 1; every process it started is stopped at the end;
* ``portfed flower superlink --fleet-host HOST --fleet-port PORT [flower-superlink options]`` — the
  SuperLink with the parties' Fleet API on a listener of its own (:mod:`portfed.flower.superlink`);
* ``portfed flower supernode --party K --superlink HOST:PORT --config CONFIG …`` — party K's SuperNode on
  its own machine;
* ``portfed flower credentials DIR --parties N`` — test TLS certificates and node keys.

Flower is imported only by these commands.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import typer

from portfed.cli.compare_cmd import console, print_comparison

app = typer.Typer(help="Parties on their own machines: the federation on Flower's deployment runtime.",
                  no_args_is_help=True)


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(code=1) from None


@app.command()
def launch(
    config: Path = typer.Argument(..., help="YAML config with `experiment: federated`."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (the same files as `portfed compare`)."),
    algorithms: str = typer.Option("", "--algorithms", "-a", help="Comma-separated (default: the config's)."),
    resume: bool = typer.Option(False, "--resume", help="Continue every algorithm from its last checkpoint."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS, no node authentication (a warning)."),
    reply_timeout: float = typer.Option(600.0, help="Seconds a round waits for the parties' replies."),
    poll_interval: float = typer.Option(0.2, help="Seconds between two pulls of replies."),
    query_timeout: float = typer.Option(120.0, help="Seconds a node has to answer the handshake (insecure launches)."),
    join_timeout: float = typer.Option(300.0, help="Seconds every party has to join at the start."),
    start_timeout: float = typer.Option(60.0, help="Seconds each process has to start."),
    secure_aggregation: bool = typer.Option(False, "--secure-aggregation",
                                            help="SecAgg+: the server learns only the parties' mean (FedAvg, "
                                                 "FedProx, FedAdam, FedYogi, FedAdagrad)."),
    secagg_clipping_range: float = typer.Option(8.0, help="SecAgg+ quantises [-c, c] (step 2c/2^24); a node "
                                                          "refuses a parameter outside it."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Run CONFIG's comparison with every party on its own SuperNode on this machine (127.0.0.1)."""
    from portfed.flower.launch import InsecureWarning, Launch
    from portfed.flower.launch import launch as run_launch
    from portfed.flower.nodes import FlowerSettings
    from portfed.flower.secure import SecAggSettings

    try:
        settings = FlowerSettings(poll_interval=poll_interval, reply_timeout=reply_timeout,
                                  query_timeout=query_timeout, join_timeout=join_timeout)
        secure = SecAggSettings(clipping_range=secagg_clipping_range) if secure_aggregation else None
        launcher = Launch(config, out, [a.strip() for a in algorithms.split(",") if a.strip()], resume=resume,
                          insecure=insecure, settings=settings, start_timeout=start_timeout, secure=secure)
        if insecure:
            console.print("[yellow]warning:[/yellow] insecure launch: no TLS and no SuperNode authentication — "
                          "for a trial on one machine only")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureWarning)  # said above, before the progress bar
            result = run_launch(launcher, progress=not quiet)
    except (ValueError, RuntimeError, TimeoutError, FileNotFoundError, FileExistsError) as exc:
        _fail(exc)
    print_comparison(result.table, out, f"Held-out period on Flower, mean (std) over {launcher.parties} parties")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def superlink(context: typer.Context) -> None:
    """Start the SuperLink: the parties' Fleet API alone on --fleet-host/--fleet-port (default
    127.0.0.1:9092), every API for the operator on --host/--port (default 127.0.0.1:9091); any other
    option is flower-superlink's (replaces this process)."""
    import sys

    args = [sys.executable, "-m", "portfed.flower.superlink", *context.args]
    os.execv(args[0], args)


@app.command()
def supernode(
    party: int = typer.Option(..., "--party", help="This party's index in the federation."),
    superlink: str = typer.Option(..., "--superlink", help="HOST:PORT of the SuperLink's parties' listener (--fleet-port)."),
    config: Path = typer.Option(..., "--config", help="This party's copy of the experiment config."),
    state_dir: Path = typer.Option(Path("~/.portfed/node"), "--state-dir", help="Where the party's state is kept."),
    root_certificates: Path = typer.Option(None, "--root-certificates", help="The CA certificate of the SuperLink."),
    auth_key: Path = typer.Option(None, "--auth-key", help="This node's private key (OpenSSH, ECDSA P-384)."),
    port: int = typer.Option(9094, "--port", help="The SuperNode's local ClientApp API port."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS, no node authentication (a warning)."),
    dp_noise: str = typer.Option("secret", "--dp-noise",
                                 help="Local-DP noise seed: secret (the node's key) or run (the in-process draw, "
                                      "which the server can regenerate: for checking against a simulation only)."),
) -> None:
    """Start party K's SuperNode (replaces this process with `flower-supernode`)."""
    import sys

    from portfed.experiment.config import FederatedConfig, load_config
    from portfed.flower.launch import supernode_command
    from portfed.flower.local_noise import check_noise_source

    if insecure == (root_certificates is not None or auth_key is not None):
        _fail(ValueError("give --root-certificates and --auth-key, or --insecure"))
    if not insecure and (root_certificates is None or auth_key is None):
        _fail(ValueError("TLS and node authentication need both --root-certificates and --auth-key"))
    try:
        check_noise_source(dp_noise)
        loaded = load_config(config)
        if not isinstance(loaded, FederatedConfig) or not 0 <= party < loaded.parties.count:
            raise ValueError(f"--party {party}: {config} has no such party of a federated experiment")
    except ValueError as exc:
        _fail(exc)
    if insecure:
        console.print("[yellow]warning:[/yellow] insecure SuperNode: no TLS, no node authentication")
    args = supernode_command(Path(sys.executable).parent, party, superlink, config, state_dir.expanduser(), port,
                             root_certificates, auth_key, dp_noise)
    os.execv(args[0], args)


@app.command()
def credentials(
    directory: Path = typer.Argument(..., help="A new directory for the files."),
    parties: int = typer.Option(..., "--parties", "-n", help="Node key pairs to make."),
    host: list[str] = typer.Option(["127.0.0.1", "localhost"], "--host",
                                   help="The SuperLink's IP addresses and DNS names (repeat)."),
) -> None:
    """Test credentials: a CA, the SuperLink's certificate, one key pair per party (not for production)."""
    from portfed.flower.certs import make_credentials

    try:
        made = make_credentials(directory, parties, host)
    except (ValueError, FileExistsError) as exc:
        _fail(exc)
    console.print(f"wrote CA, SuperLink certificate and {parties} node key pairs to [bold]{made.directory}[/bold]")
