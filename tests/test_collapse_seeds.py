"""A collapse study's arms over seeds (portfed.experiment.studies.collapse_seeds): the intervals are the t
intervals of the known per-seed values, the differences are paired by seed against the right controls."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from portfed.experiment.studies.collapse_seeds import (
    OUTCOMES,
    arm_differences,
    arm_differences_markdown,
    seed_summary,
    seed_summary_figure,
    seed_summary_markdown,
)

SIGMA = "federation.algorithm_params.fedprox.sigma=0.001"


def _rows() -> pd.DataFrame:
    """Three seeds × {local, fedprox} in the base cell and fedprox in one factor cell, values chosen by hand;
    the seeds are listed out of order in the factor cell, so that pairing by position would be wrong."""
    values = {  # (cell, algorithm): per seed 0, 1, 2 (all_cash_parties, annualized_return)
        ("base", "local"): [(0, 0.10), (1, 0.20), (0, 0.30)],
        ("base", "fedprox"): [(5, 0.02), (7, 0.04), (6, np.nan)],  # seed 2: every backtest failed
        (SIGMA, "fedprox"): [(1, 0.09), (2, 0.21), (1, 0.28)],
    }
    rows = []
    for (cell, algorithm), per_seed in values.items():
        seeds = [2, 0, 1] if cell == SIGMA else [0, 1, 2]
        for seed in seeds:
            cash, ret = per_seed[seed]
            rows.append({"cell": cell, "algorithm": algorithm, "seed": seed, "collapsed": cash > 4,
                         "noise_collapsed": False, "all_cash_parties": cash, "annualized_return": ret,
                         "sharpe": 1.0 + ret, "mean_cash": cash / 10})
    return pd.DataFrame(rows)


def _t(values: list[float]) -> tuple[float, float, float]:
    x = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean(), x.mean() - half, x.mean() + half


def test_each_arm_is_the_mean_over_seeds_with_its_t_interval_and_the_flags_are_counted() -> None:
    summary = seed_summary(_rows()).set_index(["cell", "algorithm"])
    assert list(summary.index) == [("base", "local"), ("base", "fedprox"), (SIGMA, "fedprox")]
    row = summary.loc[("base", "fedprox")]
    assert row["seeds"] == 3 and row["collapsed_seeds"] == 3 and row["noise_collapsed_seeds"] == 0
    np.testing.assert_allclose([row["all_cash_parties"], row["all_cash_parties_low"], row["all_cash_parties_high"]],
                               _t([5, 7, 6]))
    # the failed seed is left out of the return's interval, and the count says so
    np.testing.assert_allclose([row["annualized_return"], row["annualized_return_low"],
                                row["annualized_return_high"]], _t([0.02, 0.04]))
    assert row["annualized_return_n"] == 2 and row["all_cash_parties_n"] == 3
    text = seed_summary_markdown(seed_summary(_rows()))
    mean, low, high = (100 * v for v in _t([0.02, 0.04]))
    assert f"{mean:.2f} [{low:.2f}, {high:.2f}] (n = 2)" in text  # fedprox's return in percent, on two seeds
    assert "| base | fedprox | 3 | 3 / 0 |" in text
    unknown = _rows().astype({"noise_collapsed": object})
    unknown.loc[0, "noise_collapsed"] = np.nan  # a verdict not computed is not a collapse
    assert seed_summary(unknown)["noise_collapsed_seeds"].tolist() == [0, 0, 0]


def test_each_arm_is_paired_by_seed_against_local_and_against_its_base_cell() -> None:
    rows = _rows()
    differences = arm_differences(rows).set_index(["cell", "algorithm", "minus_cell", "minus_algorithm"])
    assert list(differences.index) == [("base", "fedprox", "base", "local"), (SIGMA, "fedprox", "base", "local"),
                                       (SIGMA, "fedprox", "base", "fedprox")]
    # σ = 1e-3 minus the base cell's FedProx, seed by seed (not row by row): 1−5, 2−7, 1−6
    row = differences.loc[(SIGMA, "fedprox", "base", "fedprox")]
    np.testing.assert_allclose([row["all_cash_parties"], row["all_cash_parties_low"], row["all_cash_parties_high"]],
                               _t([-4, -5, -5]))
    assert row["all_cash_parties_verdict"] == "lower"
    # the return is paired on the two seeds both have
    np.testing.assert_allclose(row["annualized_return"], np.mean([0.09 - 0.02, 0.21 - 0.04]))
    assert row["annualized_return_n"] == 2
    # against local: differences of −0.01, +0.01, −0.02 hold 0
    row = differences.loc[(SIGMA, "fedprox", "base", "local")]
    np.testing.assert_allclose(row["annualized_return"], np.mean([-0.01, 0.01, -0.02]), atol=1e-12)
    assert row["annualized_return_verdict"] == "no difference"
    assert "fedprox (base)" in arm_differences_markdown(arm_differences(rows))


def test_without_a_control_there_are_no_differences() -> None:
    rows = _rows()
    only = rows[(rows["cell"] == "base") & (rows["algorithm"] == "fedprox")]
    assert arm_differences(only).empty
    assert "No arm has a control" in arm_differences_markdown(arm_differences(only))


def test_one_seed_gives_no_interval_and_says_so() -> None:
    rows = _rows()
    one = rows[rows["seed"] == 0]
    assert set(arm_differences(one)["all_cash_parties_verdict"]) == {"one seed: no interval"}
    summary = seed_summary(one)
    assert summary["all_cash_parties_low"].isna().all()
    assert "| base | fedprox | 1 | 1 / 0 | 5.00 | 2.00 |" in seed_summary_markdown(summary)


def test_the_figure_shows_every_seed_and_each_arms_interval_in_every_panel() -> None:
    rows = _rows()
    fig = seed_summary_figure(seed_summary(rows), rows)
    assert len(fig.axes) == len(OUTCOMES)
    ticks = {t.get_text(): t.get_position()[1] for t in fig.axes[0].get_yticklabels()}
    assert ticks == {"local": 2, "fedprox": 1, "fedprox (sigma=0.001)": 0}  # the summary's order, top to bottom
    cash = fig.axes[0]
    seeds = sorted(v for line in cash.lines if line.get_color() == "0.65" for v in line.get_xdata())
    assert seeds == sorted(rows["all_cash_parties"])
