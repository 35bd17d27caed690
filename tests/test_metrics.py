"""portfed.evaluation.metrics against empyrical and hand computations."""

from __future__ import annotations

import math

import empyrical
import numpy as np
import pytest

from portfed.evaluation.metrics import asset_spread, max_drawdown, summarize, turnover


def _random_values(seed: int, n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(seed)
    returns = rng.normal(0.0005, 0.015, n)
    return 100.0 * np.concatenate([[1.0], np.cumprod(1.0 + returns)])


@pytest.fixture(params=[0, 1, 2], ids=lambda s: f"seed{s}")
def path(request: pytest.FixtureRequest) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    values = _random_values(request.param)
    returns = values[1:] / values[:-1] - 1.0
    return values, returns, summarize(values)


def test_fapv_matches_empyrical(path):
    _, returns, s = path
    assert s["fapv"] == pytest.approx(empyrical.cum_returns_final(returns, starting_value=1.0), rel=1e-9)


def test_annualized_return_matches_empyrical(path):
    _, returns, s = path
    assert s["annualized_return"] == pytest.approx(empyrical.annual_return(returns), rel=1e-9)


def test_annualized_volatility_matches_empyrical(path):
    _, returns, s = path
    assert s["annualized_volatility"] == pytest.approx(empyrical.annual_volatility(returns), rel=1e-9)


def test_sharpe_matches_empyrical(path):
    _, returns, s = path
    assert s["sharpe"] == pytest.approx(empyrical.sharpe_ratio(returns), rel=1e-9)


def test_sortino_matches_empyrical(path):
    _, returns, s = path
    assert s["sortino"] == pytest.approx(empyrical.sortino_ratio(returns), rel=1e-9)


def test_max_drawdown_matches_empyrical(path):
    _, returns, s = path
    assert s["max_drawdown"] == pytest.approx(-empyrical.max_drawdown(returns), rel=1e-9)


def test_calmar_matches_empyrical(path):
    _, returns, s = path
    assert s["calmar"] == pytest.approx(empyrical.calmar_ratio(returns), rel=1e-9)


def test_sharpe_per_period_is_mean_over_sample_std(path):
    _, returns, s = path
    assert s["sharpe_per_period"] == pytest.approx(np.mean(returns) / np.std(returns, ddof=1), rel=1e-12)
    assert s["sharpe"] == pytest.approx(s["sharpe_per_period"] * math.sqrt(252), rel=1e-12)


def test_periods_per_year_changes_annualization():
    values = _random_values(5, n=60)
    returns = values[1:] / values[:-1] - 1.0
    s = summarize(values, periods_per_year=12)
    assert s["annualized_return"] == pytest.approx(
        empyrical.annual_return(returns, period="monthly"), rel=1e-9
    )
    assert s["sharpe"] == pytest.approx(empyrical.sharpe_ratio(returns, period="monthly"), rel=1e-9)


def test_constant_growth_has_known_annualized_return_and_no_drawdown():
    g, n = 0.001, 504  # two years of +0.1 % a day
    values = 2.0 * (1.0 + g) ** np.arange(n + 1)
    s = summarize(values)
    assert s["fapv"] == pytest.approx((1.0 + g) ** n, rel=1e-12)
    assert s["annualized_return"] == pytest.approx((1.0 + g) ** 252 - 1.0, rel=1e-10)
    assert s["max_drawdown"] == 0.0
    assert s["annualized_volatility"] == pytest.approx(0.0, abs=1e-12)  # float rounding of P_t only
    assert math.isnan(s["calmar"])  # no drawdown: undefined
    assert s["sharpe"] > 1e6  # riskless positive return


def test_exactly_constant_returns_give_infinite_sharpe():
    s = summarize([1.0, 2.0, 4.0, 8.0])
    assert s["annualized_volatility"] == 0.0
    assert s["sharpe"] == math.inf
    assert s["sortino"] == math.inf


def test_max_drawdown_of_hand_series():
    # running peaks 1, 2, 2, 3, 3, 3 -> drawdowns 0, 0, .25, 0, .6, 1/3
    values = [1.0, 2.0, 1.5, 3.0, 1.2, 2.0]
    assert max_drawdown(values) == pytest.approx(0.6, abs=1e-15)
    assert summarize(values)["max_drawdown"] == pytest.approx(0.6, abs=1e-15)


def test_drawdown_from_the_initial_value_counts():
    assert max_drawdown([1.0, 0.5, 0.8]) == pytest.approx(0.5, abs=1e-15)


def test_turnover_with_holdings_is_mean_traded_asset_volume():
    weights = np.array([[0.0, 0.5, 0.5], [0.2, 0.4, 0.4]])
    holdings = np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.4]])
    # period 0: buy 0.5 + 0.5 = 1; period 1: sell 0.2 of asset 1 -> 0.2
    assert turnover(weights, holdings) == pytest.approx(0.6, abs=1e-15)
    s = summarize([1.0, 1.1, 1.2], weights=weights, holdings=holdings)
    assert s["turnover"] == pytest.approx(0.6, abs=1e-15)


def test_turnover_without_holdings_compares_consecutive_weights():
    weights = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    assert turnover(weights) == pytest.approx((2.0 + 0.0) / 2, abs=1e-15)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ([1.0], "at least 2"),
        ([], "at least 2"),
        ([1.0, 0.0, 2.0], "0.0 at position 1"),
        ([1.0, -1.0], "-1.0 at position 1"),
        ([1.0, float("nan")], "nan at position 1"),
        ([[1.0, 2.0]], "one-dimensional"),
    ],
)
def test_bad_values_raise(values, match):
    with pytest.raises(ValueError, match=match):
        summarize(values)


def test_bad_weights_and_periods_raise():
    with pytest.raises(ValueError, match="3 rows but there are 2 periods"):
        summarize([1.0, 1.1, 1.2], weights=np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="without weights"):
        summarize([1.0, 1.1], holdings=np.ones((1, 2)))
    with pytest.raises(ValueError, match="periods_per_year"):
        summarize([1.0, 1.1], periods_per_year=0)


@pytest.mark.parametrize("values", [[1.0, 1.0], [100.0] * 30, [1.0, 1.0 + 2.2e-16, 1.0, 1.0]])
def test_sharpe_of_a_constant_value_path_is_zero(values):
    """Convention: an all-cash path (zero returns, zero std; 0/0) has Sharpe 0, never nan — also
    for a single period and for values equal up to rounding."""
    s = summarize(values)
    assert s["sharpe"] == 0.0 and s["sharpe_per_period"] == 0.0 and s["sortino"] == 0.0
    assert s["fapv"] == pytest.approx(1.0, abs=1e-15) and s["max_drawdown"] == pytest.approx(0.0, abs=1e-15)


def test_sharpe_of_a_single_nonzero_return_is_undefined():
    assert math.isnan(summarize([1.0, 1.1])["sharpe"])


def test_asset_spread_is_zero_for_equal_risky_weights_and_sqrt_m_minus_1_for_one_pick():
    m = 9
    alike = np.array([[0.1] + [0.9 / m] * m, [0.55] + [0.45 / m] * m])
    assert asset_spread(alike) == pytest.approx(0.0, abs=1e-12)
    pick = np.zeros((3, m + 1))
    pick[:, 0], pick[:, 4] = 0.5, 0.5  # one asset takes all the risky weight
    assert asset_spread(pick) == pytest.approx(np.sqrt(m - 1))


def test_asset_spread_averages_over_periods_with_risky_weight_only():
    w = np.array([[1.0, 0.0, 0.0],       # all cash: left out
                  [0.0, 0.5, 0.5],       # spread 0
                  [0.0, 1.0, 0.0]])      # spread 1 (two assets: sqrt(m - 1) = 1)
    assert asset_spread(w) == pytest.approx(0.5)
    assert np.isnan(asset_spread(np.array([[1.0, 0.0, 0.0]])))  # never invested
    assert np.isnan(asset_spread(np.array([[0.5, 0.5]])))  # one risky asset: nothing to tell apart


@pytest.mark.parametrize("weights", [np.ones(3), np.empty((0, 3)), np.array([[0.5, -0.1, 0.6]]),
                                     np.array([[0.5, np.nan, 0.5]])])
def test_asset_spread_rejects_bad_weights(weights):
    with pytest.raises(ValueError, match="weights"):
        asset_spread(weights)
