"""Benchmark-relative metrics against empyrical and hand computations; the benchmark of a comparison; Table 1's
units, notes and both collapse criteria."""

from __future__ import annotations

import statistics

import empyrical
import numpy as np
import pandas as pd
import pytest
import yaml
from test_collapse_noise import SPIKES_LOCAL, SPIKES_RFA, SPIKES_RFA_JUMP

from portfed.data.errors import DataError
from portfed.evaluation import metrics_table_markdown, summarize
from portfed.evaluation.benchmark import (
    BENCHMARK_COLUMN,
    check_covers,
    parse_benchmark,
    with_relative_metrics,
)
from portfed.evaluation.relative import RELATIVE_METRICS, annual_to_period_rate, relative_metrics
from portfed.evaluation.tables import human_cells, in_percent, short_period_note
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.reports import (
    COLLAPSE_COLUMN,
    FIRST_CRITERION_COLUMN,
    assess_collapse,
    assess_noise_collapse,
    collapse_rule,
    comparison_table,
)


def _paths(seed: int, n: int = 300, beta: float = 1.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    market = rng.normal(3e-4, 0.01, n)
    strategy = beta * market + rng.normal(1e-4, 0.004, n)
    return (np.concatenate([[1.0], np.cumprod(1 + strategy)]), np.concatenate([[1.0], np.cumprod(1 + market)]))


@pytest.mark.parametrize("risk_free", [0.0, 0.03, -0.005])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relative_metrics_match_hand_computations(seed: int, risk_free: float) -> None:
    """empyrical computes them; the reference here is the module docstring's formulas by the standard
    library and numpy's least squares, so that a change in empyrical's conventions fails."""
    values, benchmark = _paths(seed)
    x, y = values[1:] / values[:-1] - 1, benchmark[1:] / benchmark[:-1] - 1
    m = relative_metrics(values, benchmark, 252, risk_free)
    rate = (1 + risk_free) ** (1 / 252) - 1
    slope, intercept = np.polyfit(y - rate, x - rate, 1)  # least squares: β and the daily α
    assert m["beta"] == pytest.approx(slope, rel=1e-9)
    assert m["alpha"] == pytest.approx((1 + intercept) ** 252 - 1, rel=1e-7)
    active = (x - y).tolist()
    assert m["tracking_error"] == pytest.approx(statistics.stdev(active) * np.sqrt(252), rel=1e-9)
    assert m["information_ratio"] == pytest.approx(np.sqrt(252) * statistics.fmean(active) / statistics.stdev(active),
                                                   rel=1e-9)

    def annual(z):
        return float(np.prod(1 + z) ** (252 / z.size) - 1)

    up, down = y > 0, y < 0
    assert m["up_capture"] == pytest.approx(annual(x[up]) / annual(y[up]), rel=1e-9)
    assert m["down_capture"] == pytest.approx(annual(x[down]) / annual(y[down]), rel=1e-9)
    assert m["up_capture"] == pytest.approx(empyrical.up_capture(x, y), rel=1e-12)  # the library's own ratio
    assert set(m) == set(RELATIVE_METRICS)


def test_capture_at_other_frequencies_uses_the_given_periods_per_year() -> None:
    values, benchmark = _paths(4, n=60)
    x, y = values[1:] / values[:-1] - 1, benchmark[1:] / benchmark[:-1] - 1
    up = y > 0
    m = relative_metrics(values, benchmark, periods_per_year=52)
    assert m["up_capture"] == pytest.approx((np.prod(1 + x[up]) ** (52 / up.sum()) - 1)
                                            / (np.prod(1 + y[up]) ** (52 / up.sum()) - 1), rel=1e-9)
    assert m["up_capture"] == pytest.approx(empyrical.up_capture(x, y, period="weekly"), rel=1e-12)


def test_a_strategy_against_itself_and_a_leveraged_copy() -> None:
    values, benchmark = _paths(0)
    same = relative_metrics(benchmark, benchmark)
    assert same["tracking_error"] == 0 and np.isnan(same["information_ratio"])
    assert same["beta"] == pytest.approx(1.0) and same["alpha"] == pytest.approx(0.0, abs=1e-15)
    assert same["up_capture"] == pytest.approx(1.0) and same["down_capture"] == pytest.approx(1.0)
    y = benchmark[1:] / benchmark[:-1] - 1
    double = np.concatenate([[1.0], np.cumprod(1 + 2 * y)])  # twice the benchmark's daily returns
    lev = relative_metrics(double, benchmark)
    assert lev["beta"] == pytest.approx(2.0) and lev["alpha"] == pytest.approx(0.0, abs=1e-12)
    assert lev["up_capture"] > 1 and lev["down_capture"] > 1


def test_relative_metrics_refuse_mismatched_or_bad_paths() -> None:
    values, benchmark = _paths(0)
    with pytest.raises(ValueError, match="same days"):
        relative_metrics(values, benchmark[:-1])
    with pytest.raises(ValueError, match="position 3"):
        relative_metrics(values, np.where(np.arange(values.size) == 3, -1.0, benchmark))
    with pytest.raises(ValueError, match="above -1"):
        annual_to_period_rate(-1.0, 252)


@pytest.mark.parametrize("risk_free", [0.0, 0.04])
def test_sharpe_and_sortino_reward_the_excess_over_the_risk_free_rate(risk_free: float) -> None:
    values, _ = _paths(3)
    x = values[1:] / values[:-1] - 1
    rate = annual_to_period_rate(risk_free, 252)
    s = summarize(values, risk_free=risk_free)
    assert s["sharpe"] == pytest.approx(empyrical.sharpe_ratio(x, risk_free=rate), rel=1e-9)
    assert s["sortino"] == pytest.approx(empyrical.sortino_ratio(x, required_return=rate), rel=1e-9)
    assert s["annualized_return"] == summarize(values)["annualized_return"]  # the rate moves ratios only
    cash = summarize(np.ones(20), risk_free=risk_free)
    assert cash["sharpe"] == (0.0 if risk_free == 0 else -np.inf)  # riskless and lagging the rate


def test_the_benchmark_setting_is_checked_at_config_time() -> None:
    tiny = yaml.safe_load(open("configs/tiny.yaml"))

    def config(**evaluation):
        return parse_config({**tiny, "evaluation": {**tiny.get("evaluation", {}), **evaluation}})

    assert config().evaluation.benchmark == "ucrp" and config().evaluation.risk_free == 0.0
    assert config(benchmark="UBAH").evaluation.benchmark == "UBAH"
    assert parse_benchmark("djia:A", ["ucrp"]).ticker == "A"
    for bad, needle in (("olmar", "none of evaluation.baselines"), ("prices.txt:SPX", "neither a bundled"),
                        ("djia:", "names no ticker")):
        with pytest.raises(ConfigError, match=needle):
            config(benchmark=bad)
    with pytest.raises(ConfigError, match="risk_free"):
        config(risk_free=-1.5)


def _frames(dates: pd.DatetimeIndex) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(7)
    paths = {f"{s}/party_{k}": np.cumprod(1 + rng.normal(0, 0.01, len(dates))) for s in ("fedavg", "UCRP", "UBAH")
             for k in (0, 1)}
    values = pd.DataFrame(paths, index=dates)
    values.loc[:, "fedavg/party_1"] = np.nan  # a failed backtest
    metrics = pd.DataFrame({"strategy": [c.split("/")[0] for c in paths], "party": [int(c[-1]) for c in paths],
                            "annualized_return": 0.0})
    return metrics, values


def test_each_party_is_compared_with_its_own_baseline_or_with_a_series(tmp_path) -> None:
    dates = pd.bdate_range("2001-01-01", periods=30)
    metrics, values = _frames(dates)
    out = with_relative_metrics(metrics, values, parse_benchmark("ucrp", ["ucrp", "ubah"]), risk_free=0.02)
    assert set(out[BENCHMARK_COLUMN]) == {"UCRP"}
    row = out[(out["strategy"] == "UBAH") & (out["party"] == 1)].iloc[0]
    expected = relative_metrics(values["UBAH/party_1"], values["UCRP/party_1"], 252, 0.02)
    assert [row[k] for k in RELATIVE_METRICS] == pytest.approx([expected[k] for k in RELATIVE_METRICS], nan_ok=True)
    assert out[(out["strategy"] == "fedavg") & (out["party"] == 1)][list(RELATIVE_METRICS)].isna().all(axis=None)
    index = pd.Series(np.linspace(100, 130, 40), index=pd.bdate_range("2000-12-25", periods=40))
    index.rename_axis("date").rename("SPX").to_frame().to_csv(tmp_path / "index.csv")
    series = parse_benchmark(f"{tmp_path / 'index.csv'}:SPX", ["ucrp"])
    check_covers(series, [dates])
    out = with_relative_metrics(metrics, values, series, risk_free=0.0)
    row = out[(out["strategy"] == "UCRP") & (out["party"] == 0)].iloc[0]
    expected = relative_metrics(values["UCRP/party_0"], index.loc[dates], 252, 0.0)
    assert row["beta"] == pytest.approx(expected["beta"]) and row[BENCHMARK_COLUMN] == series.text
    with pytest.raises(DataError, match="no price on 2001-02-19"):
        check_covers(series, [pd.bdate_range("2001-01-01", periods=40)])


def test_table1_names_its_units_and_shows_percent_to_people() -> None:
    frame = pd.DataFrame({"Annualized return (fraction)": [0.1234], "Annualized return std (fraction)": [0.05],
                          "Sharpe ratio (annualized)": [1.5], "Collapsed": ["no"]}, index=pd.Index(["fedavg"], name="Strategy"))
    frame.attrs["note"] = "a note"
    shown = in_percent(frame)
    assert shown.loc["fedavg", "Annualized return (%)"] == pytest.approx(12.34)
    assert frame.loc["fedavg", "Annualized return (fraction)"] == 0.1234  # the CSV keeps fractions
    header, rows = human_cells(frame)
    assert header == ["Strategy", "Annualized return (%)", "Sharpe ratio (annualized)", "Collapsed"]
    assert rows == [["fedavg", "12.34 (5.00)", "1.5000", "no"]]
    assert metrics_table_markdown(frame).endswith("\na note\n")
    assert short_period_note(125) and "125 trading days" in short_period_note(125) and short_period_note(126) is None


def test_table1_shows_both_collapse_criteria_with_the_noise_aware_verdict() -> None:
    """The first study's recorded false positive (rfa on configs/aggregation_spikes.yaml): the first criterion
    flags round 20, the noise-aware verdict says no; both are in Table 1."""
    config = parse_config(yaml.safe_load(open("configs/aggregation_spikes.yaml")))
    curves = {name: pd.DataFrame({"train_reward": curve, "aggregation_change_mean": jump})
              for name, curve, jump in (("local", SPIKES_LOCAL, np.zeros_like(SPIKES_LOCAL)),
                                        ("rfa", SPIKES_RFA, SPIKES_RFA_JUMP))}
    metrics = pd.DataFrame({"strategy": ["local", "local", "rfa", "rfa", "UCRP", "UCRP"], "party": [0, 1] * 3,
                            "hindsight": False, "failed": "", "mean_cash": 0.2, "annualized_return": 0.1,
                            "sharpe": 1.0, "sharpe_per_period": 0.06, "fapv": 1.1, "max_drawdown": 0.1})
    collapse = {n: assess_collapse(c, metrics[metrics["strategy"] == n], collapse_rule(config))
                for n, c in curves.items()}
    table = comparison_table(metrics, collapse, assess_noise_collapse(curves, metrics, config))
    assert table.loc["rfa", FIRST_CRITERION_COLUMN] == "yes (round 20)"
    assert table.loc["rfa", COLLAPSE_COLUMN] == "no"
    assert table.loc["UCRP", COLLAPSE_COLUMN] == table.loc["UCRP", FIRST_CRITERION_COLUMN] == "—"
    assert comparison_table(metrics, collapse).loc["rfa", COLLAPSE_COLUMN] == "yes (round 20)"  # without noise


def test_a_few_days_extrapolated_to_a_year_give_nan_captures_not_overflow() -> None:
    benchmark = np.array([1.0, 25.0, 24.0, 23.5])  # one day of +2,400 %, compounded over a year: overflow
    values = np.array([1.0, 30.0, 28.0, 27.0])
    with np.errstate(all="raise"):
        m = relative_metrics(values, benchmark)
    assert np.isnan(m["up_capture"]) and np.isfinite(m["down_capture"]) and np.isfinite(m["beta"])
