"""The comparison's figures on hand-made frames: Fig. 1a on one y-scale, Fig. 3a with UCRP and UBAH."""

from __future__ import annotations

import numpy as np
import pandas as pd

from portfed.experiment.reports import (
    figure_learning_curves,
    figure_parameter_change,
    figure_portfolio_values,
)


def _curve(size: float) -> pd.DataFrame:
    rounds = np.arange(10)
    return pd.DataFrame({"round": rounds, "aggregation_change_mean": size * (1 + 0.1 * rounds),
                         "aggregation_change_std": size * 0.1 * np.ones(10)})


def test_fig1a_panels_share_one_logarithmic_y_scale():
    fig = figure_parameter_change({"fedavg": _curve(1e-3), "fedavg+": _curve(1e-6), "local": _curve(0.0)})
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3
    assert all(ax.get_yscale() == "log" for ax in axes)
    limits = {ax.get_ylim() for ax in axes}
    assert len(limits) == 1  # one scale: 1e-6 and 1e-3 are read on the same axis
    low, high = limits.pop()
    assert low < 1e-6 and high > 1e-3
    assert any(text.get_text() == "no jump (|Δ| = 0)" for text in axes[2].texts)


def test_fig1a_without_any_jump_is_linear():
    fig = figure_parameter_change({"local": _curve(0.0)})
    assert fig.axes[0].get_yscale() == "linear"


def test_fig1a_and_1b_show_the_actors_and_the_critics_parameter_changes():
    curve = _curve(1e-3).assign(aggregation_change_mean_actor=2e-3, aggregation_change_mean_critic=5e-4,
                                round_change_mean_actor=1e-2, round_change_mean_critic=3e-3, train_reward=0.001)
    fig = figure_parameter_change({"fedavg": curve})
    assert [line.get_label() for line in fig.axes[0].get_lines()][1:] == ["actor", "critic"]
    fig = figure_learning_curves({"fedavg": curve})
    assert len(fig.axes) == 2
    assert [line.get_label() for line in fig.axes[1].get_lines()] == ["fedavg actor", "fedavg critic"]
    assert len(figure_learning_curves({"fedavg": _curve(1e-3).assign(train_reward=0.001)}).axes) == 1


def test_fig3a_draws_ucrp_and_ubah():
    dates = pd.bdate_range("2020-01-01", periods=5)
    values = {"fedavg": pd.DataFrame({"fedavg/party_0": np.linspace(1, 1.1, 5)}, index=dates)}
    references = {"UCRP": pd.Series(np.linspace(1, 1.05, 5), index=dates),
                  "UBAH": pd.Series(np.linspace(1, 1.02, 5), index=dates)}
    fig = figure_portfolio_values(values, references)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert {"fedavg", "UCRP", "UBAH"} <= set(labels)
