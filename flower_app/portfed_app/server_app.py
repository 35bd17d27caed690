"""The ServerApp: portfed's comparison (:func:`portfed.flower.server.serve`) with its run config."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from portfed.flower.nodes import FlowerSettings
from portfed.flower.secure import SecAggSettings
from portfed.flower.server import parse_node_map, serve

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    run = context.run_config
    if not run.get("config") or not run.get("out"):
        raise ValueError("the run config needs config=<experiment YAML> and out=<run directory> (absolute paths)")
    settings = FlowerSettings(poll_interval=float(run["poll-interval"]), reply_timeout=float(run["reply-timeout"]),
                              query_timeout=float(run["query-timeout"]), join_timeout=float(run["join-timeout"]))
    algorithms = [a.strip() for a in str(run.get("algorithms", "")).split(",") if a.strip()]
    secure = SecAggSettings(clipping_range=float(run["secagg-clipping-range"])) if run.get("secure-aggregation") else None
    serve(grid, str(run["config"]), str(run["out"]), algorithms or None, bool(run.get("resume", False)), settings,
          parse_node_map(str(run.get("nodes", ""))), secure)
