"""Tearsheets of a comparison directory (``portfed report RUN_DIR``): one self-contained HTML page per
algorithm and a summary page, built on skfolio's portfolio analytics and plotly figures.

Each algorithm's page shows, for its parties side by side and against the baselines on the same
universes and days: the held-out metrics (Table 1's columns, daily turnover and total cost), the
cumulative returns, the drawdowns and the rolling Sharpe ratio (skfolio ``Population`` plots of the
daily portfolio returns ``P_t / P_{t−1} − 1``), the monthly returns of every party, and each party's
composition (the daily target weights of ``weights.csv``, stacked) with its turnover.  The summary
page holds Table 1 and the party-averaged value path of every algorithm and baseline.  Pages embed
plotly.js, so they open offline; nothing is fetched.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_write_text
from portfed.experiment.backtests import TRADE_COLUMNS, party_weights
from portfed.experiment.compare import BASELINE_REFERENCE, Comparison, load_comparison
from portfed.experiment.figures import average_value_path

REPORT_DIR = "report"
#: Trading days of the rolling Sharpe ratio's window (a quarter), shortened for short periods.
ROLLING_DAYS = 63
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}"""


def _portfolio(values: pd.Series, name: str, tag: str):
    """A skfolio portfolio of the daily returns of one value path (one 'asset': the strategy)."""
    from skfolio import Portfolio

    returns = values.dropna().pct_change().dropna()
    return Portfolio(returns.to_frame(name), weights=np.ones(1), name=name, tag=tag, compounded=True,
                     annualization_factor=252)


def _figure_html(figure, first: bool) -> str:
    figure.update_layout(height=420, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return figure.to_html(full_html=False, include_plotlyjs=True if first else False)


def _table(frame: pd.DataFrame, digits: int = 4) -> str:
    return frame.to_html(float_format=lambda v: f"{v:.{digits}f}", border=0, na_rep="—")


def _page(title: str, body: list[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(body)}</body></html>\n")


def monthly_returns(values: pd.Series) -> pd.Series:
    """Simple returns per calendar month of a value path (the first month from the first value)."""
    path = values.dropna()
    ends = path.resample("ME").last()
    return ends / pd.concat([path.iloc[:1], ends.iloc[:-1]]).to_numpy() - 1.0


def algorithm_page(comparison: Comparison, algorithm: str) -> str:
    """The tearsheet of one algorithm (module docstring)."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots
    from skfolio import Population, RatioMeasure

    values, baselines = comparison.values[algorithm], comparison.baseline_values
    metrics = comparison.party_metrics
    parties = sorted(int(c.rsplit("_", 1)[1]) for c in values.columns)
    columns = ["annualized_return", "sharpe", "fapv", "max_drawdown", "turnover", "mean_cash", "asset_spread", "failed"]
    table = metrics[metrics["strategy"].isin([algorithm, *baselines.columns.str.split("/").str[0].unique()])]
    table = table.set_index(["party", "strategy"]).sort_index()[[c for c in columns if c in metrics.columns]]
    weights = (comparison.weights or {}).get(algorithm)
    body = [f"<p>Held-out period {values.index[0].date()} … {values.index[-1].date()}, {len(parties)} parties. "
            "Baselines trade the same universes and days.</p>",
            "<h2>Held-out metrics, parties side by side</h2>", _table(table)]
    if weights is not None and not weights.empty:
        costs = weights.groupby("party").agg(mean_turnover=("turnover", "mean"), total_cost=("cost", "sum"))
        body += ["<h2>Trading: mean daily turnover and total cost (fraction of value)</h2>", _table(costs)]
    population = Population([_portfolio(values[f"{algorithm}/party_{k}"], f"party {k}", algorithm)
                             for k in parties if values[f"{algorithm}/party_{k}"].notna().any()])
    reference = average_value_path(baselines, BASELINE_REFERENCE)
    population.append(_portfolio(reference, f"{BASELINE_REFERENCE} (mean over parties)", "baseline"))
    window = max(5, min(ROLLING_DAYS, len(values) // 3))
    figures = [("Cumulative returns", population.plot_cumulative_returns()),
               ("Drawdowns", population.plot_drawdowns()),
               (f"Rolling Sharpe ratio ({window} days)",
                population.plot_rolling_measure(measure=RatioMeasure.SHARPE_RATIO, window=window))]
    for i, (title, figure) in enumerate(figures):
        body += [f"<h2>{title}</h2>", _figure_html(figure, first=i == 0)]
    months = pd.DataFrame({f"party {k}": monthly_returns(values[f"{algorithm}/party_{k}"]) for k in parties}).T
    months.columns = [d.strftime("%Y-%m") for d in months.columns]
    body += ["<h2>Monthly returns</h2>", _table(months)]
    if weights is not None and not weights.empty:
        body.append("<h2>Composition (daily target weights, stacked) and turnover</h2>")
        for k in parties:
            if not (weights["party"] == k).any():
                continue
            held = party_weights(weights, k)
            figure = make_subplots(specs=[[{"secondary_y": True}]])
            for asset in held.columns.drop(list(TRADE_COLUMNS)):
                figure.add_trace(go.Scatter(x=held.index, y=held[asset], name=asset, stackgroup="w", mode="none"))
            figure.add_trace(go.Scatter(x=held.index, y=held["turnover"], name="turnover",
                                        line={"color": "black", "width": 1}), secondary_y=True)
            figure.update_layout(title=f"party {k}", yaxis={"range": [0, 1], "title": "weight"})
            body.append(_figure_html(figure, first=False))
    return _page(f"portfed tearsheet — {algorithm}", body)


def summary_page(comparison: Comparison, pages: dict[str, str]) -> str:
    """Table 1, the links to the algorithms' pages and every strategy's party-averaged value path."""
    from skfolio import Population

    links = "".join(f"<li><a href='{html.escape(page)}'>{html.escape(name)}</a></li>" for name, page in pages.items())
    population = Population([])
    for name, frame in comparison.values.items():
        path = average_value_path(frame, name)
        if not path.empty:
            population.append(_portfolio(path, name, "algorithm"))
    for name in dict.fromkeys(comparison.baseline_values.columns.str.split("/").str[0]):
        population.append(_portfolio(average_value_path(comparison.baseline_values, name), name, "baseline"))
    body = ["<h2>Table 1: held-out period, mean (std) over parties</h2>", _table(comparison.table),
            f"<h2>Algorithms</h2><ul>{links}</ul>", "<h2>Average portfolio value (mean over parties)</h2>",
            _figure_html(population.plot_cumulative_returns(), first=True)]
    return _page("portfed tearsheets — summary", body)


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``index.html`` and ``<algorithm>.html`` for the comparison in ``run_dir`` into ``out_dir``
    (default ``run_dir/report``); returns the pages written, by name (``summary`` and the algorithms)."""
    comparison = load_comparison(run_dir)
    out = Path(run_dir) / REPORT_DIR if out_dir is None else Path(out_dir)
    pages = {name: f"{name}.html" for name in comparison.values}
    written = {name: atomic_write_text(out / page, algorithm_page(comparison, name)) for name, page in pages.items()}
    written["summary"] = atomic_write_text(out / "index.html", summary_page(comparison, pages))
    return written
