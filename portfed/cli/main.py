"""The ``portfed`` command.  Each command (or command group) lives in its own module, registered here.

The modules are imported only when their command runs: ``portfed --help`` and ``portfed --version``
import neither torch nor pandas (tested), so they answer at once.  The one-line descriptions that
``portfed --help`` lists are therefore written here, beside the registration.
"""

from __future__ import annotations

import importlib
import signal
from dataclasses import dataclass

import click
import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """A command registered by name: ``module.attribute`` is a ``typer.Typer`` (a group) or a function."""

    module: str
    attribute: str
    summary: str


#: Every command, in the order ``portfed --help`` lists them.
COMMANDS: dict[str, LazyCommand] = {
    "run": LazyCommand("portfed.cli.run_cmd", "run",
                       "Run an experiment config: one agent, or a federated comparison of its algorithms."),
    "compare": LazyCommand("portfed.cli.compare_cmd", "compare",
                           "Federated configs only: `run` with --algorithms to pick the algorithms compared."),
    "data": LazyCommand("portfed.cli.data_cmd", "app", "Market data: bundled datasets, CSV files, Yahoo Finance."),
    "generators": LazyCommand("portfed.cli.generators_cmd", "app",
                              "Private data augmenters and their stylized-facts report."),
    "allocate": LazyCommand("portfed.cli.deploy_cmd", "allocate",
                            "A trained party's target weights for the next trading day."),
    "export": LazyCommand("portfed.cli.deploy_cmd", "export",
                          "A trained party's policy as TorchScript (or ONNX) with its input spec."),
    "orders": LazyCommand("portfed.cli.desk_cmd", "orders",
                          "Share orders moving today's book to a trained party's target weights (for review)."),
    "backtest": LazyCommand("portfed.cli.desk_cmd", "backtest",
                            "A trained party's model traded on new prices, beside baselines."),
    "report": LazyCommand("portfed.cli.report_cmd", "report", "HTML tearsheets of a comparison directory."),
    "tune": LazyCommand("portfed.cli.tune_cmd", "tune",
                        "Choose one knob (e.g. Fed+'s λ) on a validation year cut from the training period."),
    "walk-forward": LazyCommand("portfed.cli.walk_forward_cmd", "walk_forward",
                                "The comparison on consecutive held-out periods."),
    "study": LazyCommand("portfed.cli.study_cmd", "app", "Studies: sweeps of federated runs (the collapse map)."),
    "supervised": LazyCommand("portfed.cli.supervised_cmd", "app",
                              "The papers' supervised federated benchmarks."),
    "flower": LazyCommand("portfed.cli.flower_cmd", "app",
                          "Parties on their own machines: Flower's deployment runtime."),
}


def load_command(name: str) -> click.Command:
    """The click command of ``COMMANDS[name]``, its module imported now."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """The top-level group: lists the commands from :data:`COMMANDS` and imports one only to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # What the help page needs (a name and a line); resolve_command loads the real one.
        entry = COMMANDS.get(cmd_name)
        return None if entry is None else click.Command(cmd_name, short_help=entry.summary, help=entry.summary)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, _, rest = super().resolve_command(ctx, args)
        return name, load_command(name), rest

    def invoke(self, ctx: click.Context):
        """Run the command; what no command turned into its own message becomes one line, never a
        traceback: Ctrl-C (and SIGTERM, :func:`main`) exits 130, a file-system error 1 naming the file."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(code=130) from None
        except OSError as exc:
            typer.echo(f"error: {os_error_line(exc)}", err=True)
            raise typer.Exit(code=1) from None


def os_error_line(exc: OSError) -> str:
    """``"<reason>: <file>"`` of an ``OSError`` (both files of a rename), else its own message."""
    files = [f for f in (exc.filename, exc.filename2) if f is not None]
    if exc.strerror and files:
        return f"{exc.strerror}: {' -> '.join(map(str, files))}"
    return str(exc) or type(exc).__name__


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"portfed {version('portfed')}")
        raise typer.Exit()


app = typer.Typer(
    name="portfed",
    help="Federated reinforcement learning on financial portfolios.",
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print portfed's version and exit."),
) -> None:
    """Federated reinforcement learning on financial portfolios."""


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a run stopped by SIGTERM ends as one stopped by Ctrl-C: recorded, resumable


def main() -> None:  # pragma: no cover - console entry point
    signal.signal(signal.SIGTERM, _terminate)
    app()
