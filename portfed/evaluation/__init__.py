"""Evaluation on the held-out period: backtests, metrics, tables and figures.

It reads environments and results only; nothing here touches training internals.  The plots are
imported on first use (matplotlib costs most of this package's import time, and a party's ClientApp
process, which starts once per message, never plots).
"""

from typing import Any

from portfed.evaluation.backtest import BacktestResult, backtest, backtest_all
from portfed.evaluation.metrics import asset_spread, max_drawdown, summarize, turnover
from portfed.evaluation.tables import (
    METRIC_LABELS,
    display_name,
    metrics_rich_table,
    metrics_table,
    metrics_table_markdown,
    table_from_summaries,
    write_tables,
)

__all__ = [
    "METRIC_LABELS",
    "asset_spread",
    "backtest",
    "backtest_all",
    "BacktestResult",
    "display_name",
    "max_drawdown",
    "metrics_rich_table",
    "metrics_table",
    "metrics_table_markdown",
    "plot_learning_curve",
    "plot_portfolio_values",
    "summarize",
    "table_from_summaries",
    "turnover",
    "write_tables",
]


def __getattr__(name: str) -> Any:
    if name in ("plot_learning_curve", "plot_portfolio_values"):
        from portfed.evaluation import plots

        return getattr(plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
