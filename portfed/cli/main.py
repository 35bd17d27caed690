"""The ``portfed`` command.  Each command group lives in its own module and is registered here."""

from __future__ import annotations

import typer

from portfed.cli import (
    compare_cmd,
    data_cmd,
    deploy_cmd,
    flower_cmd,
    generators_cmd,
    report_cmd,
    run_cmd,
    study_cmd,
    supervised_cmd,
    walk_forward_cmd,
)

app = typer.Typer(
    name="portfed",
    help="Federated reinforcement learning on financial portfolios.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# Command groups (each module defines a `typer.Typer` named `app`, or top-level commands).
# --- register sub-apps below this line ---
app.add_typer(generators_cmd.app, name="generators")
app.add_typer(data_cmd.app, name="data")
app.add_typer(supervised_cmd.app, name="supervised")
app.add_typer(study_cmd.app, name="study")
app.add_typer(flower_cmd.app, name="flower")
app.command("run")(run_cmd.run)
app.command("compare")(compare_cmd.compare)
app.command("allocate")(deploy_cmd.allocate)
app.command("export")(deploy_cmd.export)
app.command("walk-forward")(walk_forward_cmd.walk_forward)
app.command("report")(report_cmd.report)


def main() -> None:  # pragma: no cover - console entry point
    app()
