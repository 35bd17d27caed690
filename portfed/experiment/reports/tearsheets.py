"""Tearsheets of a comparison directory (``portfed report RUN_DIR``): one HTML page per algorithm and a
summary page, built on skfolio's portfolio analytics and plotly figures.

Each algorithm's page shows, for its parties side by side and against the baselines on the same
universes and days: its training-collapse verdicts (both criteria, the noise-aware one the verdict),
the held-out risk and return — annualized return and volatility, the Sharpe, Sortino and Calmar ratios,
the maximum drawdown, fAPV, turnover, cash and asset spread —, the benchmark-relative metrics (tracking
error, information ratio, α, β, up/down capture against ``evaluation.benchmark``), daily turnover and
total cost, the cumulative returns, the drawdowns and the rolling Sharpe ratio (skfolio ``Population``
plots of the daily portfolio returns ``P_t / P_{t−1} − 1``), the monthly returns of every party, and
each party's composition (the daily target weights of ``weights.csv``, stacked) with its turnover.
The summary page holds Table 1 and the party-averaged value path of every algorithm and baseline.  A run
with a ``privacy`` section shows each algorithm's final ε and the guarantee it rests on (unit, mode, δ, z, S,
rounds, sampling, accountant; :func:`portfed.experiment.reports.tables.with_privacy`).  A comparison run with
``evaluation.disclosure: averaged`` gets the summary page only, which says that per-party results were
withheld and shows Table 1's party means and the means of every scalar metric (:mod:`.disclosure`).

Labels are for people: units in every header, fractions shown in percent
(:func:`portfed.evaluation.tables.in_percent`), no variable names.  The pages share one copy of
plotly.js, ``plotly.min.js``, written once into the report directory beside them and loaded by a
relative ``<script src>``: the report opens offline (nothing is fetched) as long as the directory is
kept whole.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_write_text
from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.relative import RELATIVE_METRICS
from portfed.evaluation.tables import METRIC_LABELS, human_cells, relative_labels
from portfed.experiment.party import TRADE_COLUMNS, party_weights
from portfed.experiment.reports.comparison import BASELINE_REFERENCE, Comparison, load_comparison
from portfed.experiment.reports.disclosure import AVERAGED, CLIPPED_COLUMN, SKIPPED, WITHHELD
from portfed.experiment.reports.figures import average_value_path
from portfed.experiment.reports.tables import PRIVACY_UNIT, collapse_verdict

REPORT_DIR = "report"
#: The one copy of plotly.js every page of a report loads.
PLOTLY_JS = "plotly.min.js"
#: Trading days of the rolling Sharpe ratio's window (a quarter), shortened for short periods.
ROLLING_DAYS = 63
#: The per-party metrics of the tearsheet's risk-and-return table, in order.
RISK_COLUMNS: tuple[str, ...] = ("annualized_return", "annualized_volatility", "sharpe", "sortino", "calmar",
                                 "max_drawdown", "fapv", "turnover", "mean_cash", "asset_spread", "failed")
#: Labels of the per-party columns :data:`~portfed.evaluation.tables.METRIC_LABELS` does not name.
EXTRA_LABELS: dict[str, str] = {"mean_cash": "Mean cash weight (fraction)",
                                "asset_spread": "Asset spread (coefficient of variation)", "failed": "Failed"}
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}"""


def _portfolio(values: pd.Series, name: str, tag: str):
    """A skfolio portfolio of the daily returns of one value path (one 'asset': the strategy)."""
    from skfolio import Portfolio

    returns = values.dropna().pct_change().dropna()
    return Portfolio(returns.to_frame(name), weights=np.ones(1), name=name, tag=tag, compounded=True,
                     annualization_factor=252)


def readable(figure, population, title: str, y_title: str):
    """A skfolio figure with people's labels: traces named by their portfolio (skfolio appends ``_<tag>``),
    dates on the x axis (not "Observations"), ``title`` and ``y_title``, no legend title."""
    names = {f"{p.name}_{p.tag}": p.name for p in population}
    for trace in figure.data:
        trace.name = names.get(trace.name, trace.name)
        trace.legendgroup = trace.name
        trace.hovertemplate = "%{fullData.name}<br>%{x|%Y-%m-%d}: %{y}<extra></extra>"
    figure.update_layout(title=title, xaxis_title="Date", yaxis_title=y_title, legend_title_text="")
    return figure


def _figure_html(figure) -> str:
    figure.update_layout(height=420, margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return figure.to_html(full_html=False, include_plotlyjs=False)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def people_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """``frame`` as HTML for people (:func:`~portfed.evaluation.tables.human_cells`: percent, ``mean (std)``),
    a multi-level index as leading columns, NaN as "—", ``attrs["note"]`` under it."""
    if isinstance(frame.index, pd.MultiIndex):
        flat = frame.reset_index()
        flat = flat.set_index(flat.columns[0])
        flat.attrs = dict(frame.attrs)
        frame = flat
    header, rows = human_cells(frame, digits)
    rows = [[c.replace("nan", "—") if c in ("nan", "nan (nan)") else c for c in row] for row in rows]
    note = frame.attrs.get("note")
    return _html_table(header, rows) + (f"<p><small>{html.escape(note)}</small></p>" if note else "")


def _page(title: str, body: list[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<script src='{PLOTLY_JS}' charset='utf-8'></script><style>{_STYLE}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{''.join(body)}</body></html>\n")


def monthly_returns(values: pd.Series) -> pd.Series:
    """Simple returns per calendar month of a value path (the first month from the first value)."""
    path = values.dropna()
    ends = path.resample("ME").last()
    return ends / pd.concat([path.iloc[:1], ends.iloc[:-1]]).to_numpy() - 1.0


def party_tables(metrics: pd.DataFrame, strategies: list[str]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The risk-and-return table and (when the run has them) the benchmark-relative table of ``strategies``,
    rows (party, strategy), columns labelled with their units (fractions: the page shows percent)."""
    rows = metrics[metrics["strategy"].isin(strategies)].rename(columns={"party": "Party", "strategy": "Strategy"})
    rows = rows.set_index(["Party", "Strategy"]).sort_index()
    labels = {**METRIC_LABELS, **EXTRA_LABELS}
    risk = rows[[c for c in RISK_COLUMNS if c in rows.columns]].rename(columns=labels)
    if BENCHMARK_COLUMN not in rows.columns:
        return risk, None
    relative = rows[list(RELATIVE_METRICS)].rename(columns=relative_labels(str(rows[BENCHMARK_COLUMN].iloc[0])))
    return risk, relative


def collapse_summary(comparison: Comparison, algorithm: str) -> str:
    """Both collapse criteria of ``algorithm``, the noise-aware one as the verdict."""
    first = comparison.collapse[algorithm]
    noise = (comparison.noise_collapse or {}).get(algorithm)
    verdict = collapse_verdict(first) if noise is None else collapse_verdict(noise, first)
    return (f"<p><b>Training collapse: {html.escape(verdict)}</b> (the noise-aware criterion, local training as "
            f"its control). First criterion: {html.escape(collapse_verdict(first))} — it alone can flag a flat, "
            "noisy learning curve.</p>")


def privacy_summary(comparison: Comparison, algorithm: str) -> str:
    """``algorithm``'s final ε from Table 1's privacy column, with the note that names the guarantee ("" without)."""
    column = next((c for c in comparison.table.columns if str(c).endswith(PRIVACY_UNIT)), None)
    if column is None:
        return ""
    note = str(comparison.table.attrs.get("note", "")).rpartition("\n\n")[2]
    return (f"<p><b>Differential privacy: {html.escape(str(column))} = {comparison.table.at[algorithm, column]:.3g}"
            f"</b>. {html.escape(note)}</p>")


def algorithm_page(comparison: Comparison, algorithm: str) -> str:
    """The tearsheet of one algorithm (module docstring)."""
    from skfolio import Population, RatioMeasure

    values, baselines = comparison.values[algorithm], comparison.baseline_values
    parties = sorted(int(c.rsplit("_", 1)[1]) for c in values.columns)
    risk, relative = party_tables(comparison.party_metrics,
                                  [algorithm, *baselines.columns.str.split("/").str[0].unique()])
    weights = (comparison.weights or {}).get(algorithm)
    body = [f"<p>Held-out period {values.index[0].date()} … {values.index[-1].date()} "
            f"({len(values) - 1} trading days), {len(parties)} parties. Baselines trade the same universes and "
            "days.</p>", collapse_summary(comparison, algorithm), privacy_summary(comparison, algorithm),
            "<h2>Held-out metrics, parties side by side: risk and return</h2>", people_table(risk)]
    if relative is not None:
        body += ["<h2>Against the benchmark</h2>", people_table(relative)]
    if weights is not None and not weights.empty:
        costs = weights.groupby("party").agg(turnover=("turnover", "mean"), cost=("cost", "sum"))
        costs.index.name = "Party"
        costs.columns = ["Mean daily turnover (fraction of value)", "Total cost (sum of daily costs, fraction of value)"]
        body += ["<h2>Trading: turnover and costs</h2>", people_table(costs)]
    population = Population([_portfolio(values[f"{algorithm}/party_{k}"], f"party {k}", algorithm)
                             for k in parties if values[f"{algorithm}/party_{k}"].notna().any()])
    reference = average_value_path(baselines, BASELINE_REFERENCE)
    population.append(_portfolio(reference, f"{BASELINE_REFERENCE} (mean over parties)", "baseline"))
    window = max(5, min(ROLLING_DAYS, len(values) // 3))
    figures = [("Cumulative returns", readable(population.plot_cumulative_returns(), population,
                                               "Value of 1 invested (compounded)", "Value (× initial)")),
               ("Drawdowns", readable(population.plot_drawdowns(), population, "Drawdown from the running peak",
                                      "Drawdown (%)")),
               (f"Rolling Sharpe ratio ({window} days)",
                readable(population.plot_rolling_measure(measure=RatioMeasure.ANNUALIZED_SHARPE_RATIO, window=window),
                         population, f"Sharpe ratio over the last {window} trading days",
                         "Sharpe ratio (annualized)"))]
    for title, figure in figures:
        body += [f"<h2>{title}</h2>", _figure_html(figure)]
    months = pd.DataFrame({f"party {k}": monthly_returns(values[f"{algorithm}/party_{k}"]) for k in parties}).T
    months.columns = [f"{d.strftime('%Y-%m')} (fraction)" for d in months.columns]
    months.index.name = "Party"
    body += ["<h2>Monthly returns (%)</h2>", people_table(months)]
    if weights is not None and not weights.empty:
        body.append("<h2>Composition (daily target weights, stacked) and turnover</h2>")
        body += [_figure_html(composition_figure(weights, k)) for k in parties if (weights["party"] == k).any()]
    return _page(f"portfed tearsheet — {algorithm}", body)


def composition_figure(weights: pd.DataFrame, party: int):
    """Party ``party``'s daily target weights (stacked, cash first) and turnover, from a ``weights.csv`` frame."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    held = party_weights(weights, party)
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    for asset in held.columns.drop(list(TRADE_COLUMNS)):
        figure.add_trace(go.Scatter(x=held.index, y=held[asset], name=asset, stackgroup="w", mode="none"))
    figure.add_trace(go.Scatter(x=held.index, y=held["turnover"], name="turnover",
                                line={"color": "black", "width": 1}), secondary_y=True)
    figure.update_layout(title=f"Party {party}", xaxis_title="Date",
                         yaxis={"range": [0, 1], "title": "Weight (fraction of value)"})
    figure.update_yaxes(title_text="Turnover (fraction of value)", secondary_y=True)
    return figure


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
    figure = readable(population.plot_cumulative_returns(), population,
                      "Party-averaged value of 1 invested (compounded)", "Value (× initial)")
    body = ["<h2>Table 1: held-out period, mean (std) over parties</h2>", people_table(comparison.table),
            f"<h2>Algorithms</h2><ul>{links}</ul>", "<h2>Average portfolio value (mean over parties)</h2>",
            _figure_html(figure)]
    return _page("portfed tearsheets — summary", body)


def averaged_summary_page(comparison: Comparison) -> str:
    """The summary of an averaged comparison (:mod:`.disclosure`): Table 1's party means, the party means of
    every scalar metric (with the count of clipped values when the server learnt only sums), and the statement
    that per-party results were withheld (no algorithm pages)."""
    means = comparison.means if comparison.means is not None else pd.DataFrame()
    columns = [c for c in ("annualized_return", "annualized_volatility", "sharpe", "sortino", "calmar",
                           "max_drawdown", "fapv", "turnover", "mean_cash", "asset_spread") if c in means.columns]
    counts = ["parties", "failed", *([CLIPPED_COLUMN] if CLIPPED_COLUMN in means.columns else [])]
    labels = {**METRIC_LABELS, **EXTRA_LABELS, "parties": "Parties", "failed": "Failed backtests",
              CLIPPED_COLUMN: "Values clipped"}
    frame = means.set_index("strategy")[[*counts, *columns]]
    frame = frame.astype(dict.fromkeys(counts, int)).astype(dict.fromkeys(counts, str)).rename(columns=labels)
    frame.index.name = "Strategy"
    body = [f"<p><b>Per-party results were withheld.</b> {html.escape(WITHHELD)} Not produced: "
            f"{html.escape(SKIPPED)}.</p>",
            "<h2>Table 1: held-out period, mean over parties</h2>", people_table(comparison.table),
            "<h2>Held-out metrics, mean over the parties that traded</h2>", people_table(frame)]
    return _page("portfed tearsheets — summary (party averages only)", body)


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``index.html``, ``<algorithm>.html`` and their shared ``plotly.min.js`` for the comparison in
    ``run_dir`` into ``out_dir`` (default ``run_dir/report``); returns the pages written, by name
    (``summary`` and the algorithms).  An averaged comparison gets its summary page only
    (:func:`averaged_summary_page`)."""
    from plotly.offline import get_plotlyjs

    comparison = load_comparison(run_dir)
    out = Path(run_dir) / REPORT_DIR if out_dir is None else Path(out_dir)
    atomic_write_text(out / PLOTLY_JS, get_plotlyjs())
    if comparison.disclosure == AVERAGED:
        return {"summary": atomic_write_text(out / "index.html", averaged_summary_page(comparison))}
    pages = {name: f"{name}.html" for name in comparison.values}
    written = {name: atomic_write_text(out / page, algorithm_page(comparison, name)) for name, page in pages.items()}
    written["summary"] = atomic_write_text(out / "index.html", summary_page(comparison, pages))
    return written
