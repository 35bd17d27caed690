"""Backtest loop, online hook, tables and figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from portfed.agents.baselines import ConstantRebalancedPolicy, UniformBuyAndHold, uniform_weights
from portfed.envs import PortfolioEnv
from portfed.envs.costs import transaction_remainder
from portfed.evaluation import (
    backtest,
    backtest_all,
    metrics_rich_table,
    metrics_table,
    metrics_table_markdown,
    plot_learning_curve,
    plot_portfolio_values,
    summarize,
    write_tables,
)

WINDOW = 5
C = 0.002


@pytest.fixture(scope="module")
def close() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    prices = 20.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, (80, 3)), axis=0))
    return pd.DataFrame(prices, index=pd.bdate_range("2020-01-01", periods=80), columns=["A", "B", "C"])


def _env(close: pd.DataFrame) -> PortfolioEnv:
    return PortfolioEnv(close, window_size=WINDOW, commission=C, start=close.index[20], initial_value=3.0)


class AlternatingPolicy:
    """All in asset 1 on even steps, all in asset 2 on odd steps; records what it is shown."""

    hindsight = False

    def __init__(self, name: str = "alternating") -> None:
        self.name = name
        self.seen_dates: list[pd.Timestamp] = []
        self.updates: list[tuple[pd.Timestamp, float]] = []

    def reset(self) -> None:
        self.seen_dates, self.updates = [], []

    def act(self, observation):
        self.seen_dates.append(observation["date"])
        w = np.zeros(observation["weights"].shape)
        w[1 + len(self.seen_dates) % 2] = 1.0
        return w

    def on_step(self, observation, reward, info):
        self.updates.append((observation["date"], reward))


def test_backtest_records_the_episode_and_matches_a_numpy_replay(close):
    env = _env(close)
    policy = AlternatingPolicy()
    result = backtest(policy, env)
    n = len(env.dates) - 1
    assert result.values.shape == (n + 1,) and result.actions.shape == (n, 4)
    assert result.values[0] == 3.0
    assert result.dates.equals(env.dates)
    assert policy.seen_dates == list(env.dates[:-1])  # the decision day of every action
    # independent replay of P_{t+1} = P_t μ_t y_{t+1}·w_t with the exact μ
    period = close.loc[env.dates].to_numpy()
    y = np.column_stack([np.ones(n), period[1:] / period[:-1]])
    value, held = 3.0, np.array([1.0, 0.0, 0.0, 0.0])
    for t in range(n):
        w = result.actions[t]
        np.testing.assert_allclose(result.holdings[t], held, atol=1e-15)
        value *= transaction_remainder(held, w, C) * (y[t] @ w)
        held = y[t] * w / (y[t] @ w)
        assert result.values[t + 1] == pytest.approx(value, rel=1e-12)
    assert result.rewards.sum() == pytest.approx(np.log(result.values[-1] / 3.0), rel=1e-12)
    assert not policy.updates  # online updates are off by default


def test_summary_uses_the_envs_turnover(close):
    result = backtest(AlternatingPolicy(), _env(close))
    s = result.summary()
    assert s["turnover"] == pytest.approx(result.turnover.mean(), rel=1e-12)
    assert s["turnover"] == pytest.approx((1.0 + 2.0 * (len(result.rewards) - 1)) / len(result.rewards))
    assert s["fapv"] == pytest.approx(result.values[-1] / 3.0, rel=1e-12)
    assert s == summarize(result.values, weights=result.actions, holdings=result.holdings)


def test_online_hook_sees_each_new_day_once(close):
    env = _env(close)
    policy = AlternatingPolicy()
    result = backtest(policy, env, online=True)
    assert [d for d, _ in policy.updates] == list(env.dates[1:])
    np.testing.assert_allclose([r for _, r in policy.updates], result.rewards)


def test_online_without_hook_is_refused(close):
    with pytest.raises(TypeError, match="no on_step"):
        backtest(UniformBuyAndHold(), _env(close), online=True)


def test_random_episode_env_is_refused(close):
    env = PortfolioEnv(close, window_size=WINDOW, episode_length=10)
    with pytest.raises(ValueError, match="episode_length=10"):
        backtest(UniformBuyAndHold(), env)


def test_backtest_all_builds_fresh_envs_and_refuses_duplicate_names(close):
    made: list[PortfolioEnv] = []

    def make_env() -> PortfolioEnv:
        made.append(_env(close))
        return made[-1]

    policies = [UniformBuyAndHold(), ConstantRebalancedPolicy(uniform_weights(3), name="UCRP")]
    results = backtest_all(policies, make_env, progress=True)
    assert list(results) == ["UBAH", "UCRP"] and len(made) == 2 and made[0] is not made[1]
    with pytest.raises(ValueError, match="'UBAH' is used more than once"):
        backtest_all([UniformBuyAndHold(), UniformBuyAndHold()], make_env)


@pytest.fixture(scope="module")
def results(close):
    best = np.array([0.0, 0.0, 1.0, 0.0])
    policies = [
        UniformBuyAndHold(),
        ConstantRebalancedPolicy(uniform_weights(3), name="UCRP"),
        ConstantRebalancedPolicy(best, name="Best Stock", hindsight=True),
    ]
    return backtest_all(policies, lambda: _env(close))


def test_metrics_table_labels_hindsight_and_holds_the_summaries(results):
    table = metrics_table(results)
    assert list(table.index) == ["UBAH", "UCRP", "Best Stock (hindsight)"]
    assert {"fAPV (× initial value)", "Annualized return (fraction)", "Sharpe ratio (annualized)",
            "Sharpe ratio (daily)", "Max drawdown (fraction)"} <= set(table.columns)
    assert table.loc["UCRP", "fAPV (× initial value)"] == pytest.approx(results["UCRP"].summary()["fapv"], rel=1e-15)
    assert table.loc["UBAH", "Max drawdown (fraction)"] == pytest.approx(results["UBAH"].summary()["max_drawdown"],
                                                                         rel=1e-15)


def test_markdown_and_rich_tables(results):
    table = metrics_table(results)
    md = metrics_table_markdown(table).splitlines()
    assert md[0].startswith("| Strategy | fAPV (× initial value) | Annualized return (%) |")  # people read percent
    assert "| Turnover (% of value per day) |" in md[0]
    assert len(md) == 2 + 3
    assert md[4].startswith("| Best Stock (hindsight) | ")
    assert f"{table.loc['UCRP', 'fAPV (× initial value)']:.4f}" in md[3]
    assert f"| {100 * table.loc['UCRP', 'Annualized return (fraction)']:.2f} |" in md[3]
    rich = metrics_rich_table(table, title="test")
    assert rich.row_count == 3 and len(rich.columns) == 1 + table.shape[1]


def test_write_tables_round_trips(results, tmp_path):
    table = metrics_table(results)
    csv_path, md_path = write_tables(table, tmp_path / "out", stem="baselines")
    back = pd.read_csv(csv_path, index_col=0)
    pd.testing.assert_frame_equal(back, table, check_exact=False, rtol=1e-12)
    assert md_path.read_text() == metrics_table_markdown(table)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["baselines.csv", "baselines.md"]


def test_plots_write_png(results, tmp_path):
    png = b"\x89PNG\r\n\x1a\n"
    values_path = plot_portfolio_values(results, tmp_path / "values.png", log_scale=True)
    assert values_path.read_bytes().startswith(png)
    curve = pd.DataFrame({"round": [0, 1, 2], "mean_reward": [0.1, 0.2, 0.25], "party": ["a", "b", "c"]})
    curve_path = plot_learning_curve(curve, tmp_path / "curve.png")  # x: the "round" column
    assert curve_path.read_bytes().startswith(png)
    with pytest.raises(ValueError, match="empty frame"):
        plot_learning_curve(curve.iloc[:0], tmp_path / "empty.png")
    with pytest.raises(ValueError, match="'loss' not in the frame"):
        plot_learning_curve(curve, tmp_path / "bad.png", columns=["loss"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "values.png"]
