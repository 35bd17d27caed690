"""The figures of the federated comparison (paper 000 Fig. 1a, 1b, 1c and Fig. 3a) and of the collapse study.

Each ``figure_*`` function returns a bare :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot),
so a notebook can display it; :func:`save_figure` writes it atomically as PNG.  Inputs are the
per-algorithm frames a run directory holds (``learning_curve.csv``, ``interpolation.csv``,
``portfolio_values.csv``), keyed by algorithm name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from portfed._io import atomic_save
from portfed.experiment.party import TRADE_COLUMNS, party_weights
from portfed.experiment.reports.collapse import CollapseReport


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    return atomic_save(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))


def _require(frames: Mapping[str, object], what: str) -> None:
    if not frames:
        raise ValueError(f"{what} needs at least one algorithm")


def figure_parameter_change(curves: Mapping[str, pd.DataFrame],
                            collapse: Mapping[str, CollapseReport] | None = None) -> Figure:
    """Fig. 1a: per algorithm, the party mean of mean ``|Δ parameters|`` across the aggregation step per
    round, with a band of ± the party mean of its std over the coordinates; spikes of the collapse rule
    marked, the collapse round as a vertical line.

    Every panel shares one logarithmic y-axis, so the magnitudes the figure is about (a FedAvg jump of
    1e-3 against a Fed+ one of 1e-6) compare at a glance; an algorithm whose parties never jump (local
    training: ``|Δ| ≡ 0``) says so in its panel.  With no positive change at all the axis is linear.
    When the federated vector holds two networks (``agent.learner: actor_critic``, ``federation.share:
    actor_critic``) each panel adds one line per network (:func:`network_columns`).
    """
    _require(curves, "figure_parameter_change")
    cols = min(4, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig = _figure(3.2 * cols, 2.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True).ravel()
    logarithmic = any((curve["aggregation_change_mean"] > 0).any() for curve in curves.values())
    for ax, (name, curve) in zip(axes, curves.items(), strict=False):
        x, mean, std = curve["round"], curve["aggregation_change_mean"], curve["aggregation_change_std"]
        if logarithmic:
            ax.set_yscale("log", nonpositive="mask")
        if (mean > 0).any() or not logarithmic:
            ax.plot(x, mean, linewidth=1.2)
            ax.fill_between(x, (mean - std).clip(lower=0.0), mean + std, alpha=0.25)  # |Δ| >= 0
        drawn = [ax.plot(x, curve[column], linewidth=0.9, linestyle=style, label=part)
                 for (part, column), style in zip(network_columns(curve, "aggregation_change_mean").items(),
                                                  ("--", ":"), strict=False)
                 if (curve[column] > 0).any() or not logarithmic]
        if not (mean > 0).any():
            ax.text(0.5, 0.5, "no jump (|Δ| = 0)", transform=ax.transAxes, ha="center", va="center",
                    color="grey")
        report = None if collapse is None else collapse.get(name)
        if report is not None:
            spikes = list(report.spikes)
            ax.plot(x.iloc[spikes], mean.iloc[spikes], "rv", markersize=5, label="spike")
            if report.collapsed and report.round is not None:  # dated (spike) collapses only
                ax.axvline(report.round, color="red", linestyle="--", linewidth=0.8, label="collapse")
        if drawn:
            ax.legend(fontsize="x-small")
        ax.set_title(name)
        ax.set_xlabel("round")
    axes[0].set_ylabel("|Δ parameters| at aggregation" + (" (log)" if logarithmic else ""))
    for ax in axes[len(curves):]:
        ax.set_visible(False)
    fig.suptitle("Parameter change across the aggregation step (Fed+ paper, Fig. 1a), one y-scale")
    return fig


def network_columns(curve: pd.DataFrame, prefix: str) -> dict[str, str]:
    """Network name → the learning-curve column ``<prefix>_<name>`` (``actor``, ``critic``; none for a
    vector of one network, :func:`portfed.experiment.party.diagnostics.learning_curve`)."""
    return {c.removeprefix(f"{prefix}_"): c for c in curve.columns if c.startswith(f"{prefix}_")
            and c.removeprefix(f"{prefix}_") in ("actor", "critic")}


def figure_learning_curves(curves: Mapping[str, pd.DataFrame],
                           collapse: Mapping[str, CollapseReport] | None = None) -> Figure:
    """Fig. 1b: the party-averaged training reward per round, one line per algorithm (collapse marked ×).

    Below it, where the curves have it, the party-averaged cash weight the policies chose in their local
    steps (``train_cash``: a collapse into cash shows here as it happens, before any backtest), and with
    two networks in the federated vector (actor-critic) each network's mean ``|w_k^{t+1} − w_k^t|`` over
    the round (its parameter change: local training and aggregation).
    """
    _require(curves, "figure_learning_curves")
    networks = any(network_columns(curve, "round_change_mean") for curve in curves.values())
    cash = any(curve.get("train_cash", pd.Series(dtype=float)).notna().any() for curve in curves.values())
    panels = 1 + cash + networks
    fig = _figure(9, 5 + 3 * (panels - 1))
    ax = fig.add_subplot(panels, 1, 1)
    if cash:
        held = fig.add_subplot(panels, 1, 2, sharex=ax)
        for name, curve in curves.items():
            if "train_cash" in curve:
                held.plot(curve["round"], curve["train_cash"], linewidth=1.0, label=name)
        held.set_ylim(-0.02, 1.02)
        held.set_xlabel("round")
        held.set_ylabel("mean cash weight chosen")
        held.set_title("The cash share of the portfolios the policies chose in training")
        held.legend(fontsize="x-small", ncol=2)
    if networks:
        changes = fig.add_subplot(panels, 1, panels, sharex=ax)
        for name, curve in curves.items():
            for (part, column), style in zip(network_columns(curve, "round_change_mean").items(), ("-", "--"),
                                             strict=False):
                changes.plot(curve["round"], curve[column], linestyle=style, linewidth=1.0, label=f"{name} {part}")
        changes.set_yscale("log", nonpositive="mask")
        changes.set_xlabel("round")
        changes.set_ylabel("|Δ parameters| over the round (log)")
        changes.set_title("The actor's and the critic's parameter changes per round")
        changes.legend(fontsize="x-small", ncol=2)
    for name, curve in curves.items():
        (line,) = ax.plot(curve["round"], curve["train_reward"], label=name, linewidth=1.2)
        report = None if collapse is None else collapse.get(name)
        if report is not None and report.collapsed and report.round is not None:
            at = curve.index[curve["round"] == report.round]
            ax.plot(curve.loc[at, "round"], curve.loc[at, "train_reward"], "x", color=line.get_color(),
                    markersize=10, markeredgewidth=2)
    ax.set_title("Average learning curves (paper 000 Fig. 1b); × = detected collapse")
    ax.set_xlabel("round")
    ax.set_ylabel("mean training log return per day")
    ax.legend(fontsize="small", ncol=2)
    return fig


def figure_interpolation(interpolation: Mapping[str, pd.DataFrame]) -> Figure:
    """Fig. 1c: party-averaged local performance along ``(1 − λ) w_k + λ w̃`` at each chosen round.

    One panel per round, one line per algorithm; the dashed line of the same colour is the previous
    round's global model on the same data.
    """
    _require(interpolation, "figure_interpolation")
    rounds = sorted({int(t) for frame in interpolation.values() for t in frame["round"]})
    if not rounds:
        raise ValueError("figure_interpolation: no round has interpolation results")
    fig = _figure(max(8.0, 3.6 * len(rounds)), 3.6)
    axes = fig.subplots(1, len(rounds), squeeze=False).ravel()
    for ax, t in zip(axes, rounds, strict=True):
        for name, frame in interpolation.items():
            at = frame[frame["round"] == t]
            if at.empty:
                continue
            mean = at.groupby("lam", sort=True)[["log_return", "previous_global_log_return"]].mean()
            (line,) = ax.plot(mean.index, mean["log_return"], marker=".", label=name, linewidth=1.2)
            ax.axhline(mean["previous_global_log_return"].iloc[0], color=line.get_color(), linestyle="--",
                       linewidth=0.8)
        ax.set_title(f"after round {t}")
        ax.set_xlabel("λ  (0: local model, 1: server model)")
    axes[0].set_ylabel("mean daily log return on own training data")
    axes[-1].legend(fontsize="small")
    fig.suptitle("Local performance along (1 − λ) w_k + λ w̃ (paper 000 Fig. 1c)\n"
                 "mean over parties; dashed: the previous round's global model")
    return fig


def average_value_path(values: pd.DataFrame, prefix: str) -> pd.Series:
    """The mean over parties of ``P_t / P_0`` of the columns ``"<prefix>/party_<k>"``.

    Indexed by date when every party trades the same days; in a cross-market federation (calendars
    differ: some columns are NaN on some dates) by the trading day of each party's held-out period.
    Parties whose backtest failed (an all-NaN column: the policy could not trade) are left out; with
    none left the path is empty.
    """
    columns = [c for c in values.columns if c.startswith(f"{prefix}/party_")]
    if not columns:
        raise ValueError(f"no column of strategy {prefix!r} in {list(values.columns)[:5]} …")
    columns = [c for c in columns if values[c].notna().any()]
    if not columns:
        return pd.Series(dtype=np.float64)
    paths = values[columns]
    if not paths.isna().to_numpy().any():
        return (paths / paths.iloc[0]).mean(axis=1)
    by_day = {c: (p := paths[c].dropna()).reset_index(drop=True) / p.iloc[0] for c in columns}
    path = pd.concat(by_day, axis=1).mean(axis=1)
    path.index.name = "trading day"
    return path


def figure_portfolio_values(values: Mapping[str, pd.DataFrame], references: Mapping[str, pd.Series]) -> Figure:
    """Fig. 3a: the party-averaged portfolio value over the held-out period per algorithm, and the
    party-averaged baselines of ``references`` (e.g. UCRP and UBAH) in black, dashed and dotted."""
    _require(values, "figure_portfolio_values")
    _require(references, "figure_portfolio_values (references)")
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    for name, frame in values.items():
        path = average_value_path(frame, name)
        if path.empty:  # every party's policy blew up: nothing traded (see the collapse verdict)
            continue
        ax.plot(path.index, path.to_numpy(), label=name, linewidth=1.2)
    for (label, reference), style in zip(references.items(), ("--", ":", "-."), strict=False):
        ax.plot(reference.index, reference.to_numpy(), color="black", linestyle=style, label=label, linewidth=1.2)
    first = next(iter(references.values()))
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set_title("Average portfolio value over the held-out period (Fed+ paper, Fig. 3a)")
    ax.set_xlabel(first.index.name if first.index.name == "trading day" else "date")
    ax.set_ylabel("portfolio value / initial value, mean over parties")
    ax.legend(fontsize="small", ncol=2)
    if first.index.name != "trading day":
        fig.autofmt_xdate()
    return fig


def figure_weight_composition(weights: Mapping[str, pd.DataFrame], party: int) -> Figure:
    """The portfolio composition of party ``party`` over the held-out period, one panel per algorithm:
    its deployed model's daily target weights ``w_t`` (cash first) stacked to 1, and its daily turnover."""
    _require(weights, "figure_weight_composition")
    fig = _figure(9, 2.6 * len(weights) + 0.6)
    axes = fig.subplots(len(weights), 1, squeeze=False, sharex=True).ravel()
    for ax, (name, frame) in zip(axes, weights.items(), strict=True):
        held = party_weights(frame, party)
        assets = held.drop(columns=list(TRADE_COLUMNS))
        ax.stackplot(assets.index, assets.to_numpy().T, labels=list(assets.columns), linewidth=0)
        turn = ax.twinx()
        turn.plot(held.index, held["turnover"], color="black", linewidth=0.7, label="turnover")
        turn.set_ylabel("turnover")
        ax.set_ylim(0.0, 1.0)
        ax.set_ylabel("weight")
        ax.set_title(name)
    axes[0].legend(loc="upper left", fontsize="x-small", ncol=min(6, 1 + len(assets.columns)))
    fig.suptitle(f"Party {party}: daily target weights of the deployed model (stacked) and turnover (line)")
    fig.autofmt_xdate()
    return fig


def spike_alignment(curve: pd.DataFrame, report: CollapseReport) -> pd.DataFrame:
    """Each spike round of ``report`` with its jump, the reward before and after, and the lag to the collapse."""
    rows = []
    reward = curve["train_reward"].to_numpy()
    for s in report.spikes:
        rows.append({
            "spike_round": s,
            "jump": float(curve["aggregation_change_mean"].iloc[s]),
            "reward_before": float(np.nanmean(reward[max(0, s - 3): s])) if s > 0 else float("nan"),
            "reward_after": float(np.nanmean(reward[s: s + 3])),
            "rounds_to_collapse": (report.round - s) if report.round is not None else None,
        })
    return pd.DataFrame(rows, columns=["spike_round", "jump", "reward_before", "reward_after", "rounds_to_collapse"])


def figure_collapse_map(table: pd.DataFrame, n_seeds: int,
                        title: str = "Training collapse: fraction of seeds per cell and algorithm") -> Figure:
    """The collapse study's map: cell × algorithm coloured by the fraction of seeds that collapsed
    (white 0 … dark red 1), each square labelled ``collapsed/seeds``; empty where no run finished."""
    if table.empty:
        raise ValueError("the collapse map needs at least one finished run")
    values = table.to_numpy(dtype=np.float64)
    label = max(len(str(name)) for name in table.index)  # the cell names are the y labels
    fig = _figure(2.0 + 0.9 * values.shape[1] + 0.075 * label, 2.0 + 0.4 * values.shape[0])
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(values):
        if np.isfinite(value):
            ax.text(j, i, f"{round(value * n_seeds)}/{n_seeds}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")
    ax.set_xticks(range(values.shape[1]), table.columns, rotation=30, ha="right")
    ax.set_yticks(range(values.shape[0]), table.index)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="collapsed seeds / seeds")
    return fig


def figure_validation_curve(curve: pd.DataFrame, key: str, chosen: int) -> Figure:
    """``portfed tune``'s validation curve: the score (mean over seeds, ± std as error bars) per value of
    ``key`` in grid order — on a log axis when every value is a positive number — and the ``chosen`` one
    (row index) marked."""
    if curve.empty:
        raise ValueError("the validation curve needs at least one value")
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in curve["value"])
    x = curve["value"].to_numpy(dtype=np.float64) if numeric else np.arange(len(curve), dtype=np.float64)
    fig = _figure(6.0, 3.5)
    ax = fig.add_subplot()
    ax.errorbar(x, curve["score"], yerr=curve["score_std"], marker="o", capsize=3)
    ax.plot([x[chosen]], [curve["score"].iloc[chosen]], marker="*", markersize=14, color="tab:red", linestyle="",
            label=f"chosen: {curve['value'].iloc[chosen]}")
    if numeric:
        ax.set_xscale("log")
    else:
        ax.set_xticks(x, [str(v) for v in curve["value"]])
    ax.set_xlabel(key)
    ax.set_ylabel("validation score (mean log fAPV)")
    ax.set_title(f"Validation curve, {int(curve['seeds'].iloc[0])} seed(s) per value")
    ax.legend()
    return fig


def figure_over_seeds(summary: pd.DataFrame, panels: Mapping[str, tuple[str, bool]], title: str,
                      seeds: Mapping[str, pd.DataFrame] | None = None, zero: bool = False) -> Figure:
    """Means over seeds with their 95 % intervals, one panel per metric (``panels``: column → (label,
    percent?)), one row per ``summary`` index entry (top to bottom): the mean ``<column>`` as a diamond, its
    interval ``<column>_low`` … ``_high`` as a bar (none with one seed), each seed's value of ``seeds[name]``
    (one row per seed) as a grey dot, and with ``zero`` a line at 0 (for differences)."""
    if summary.empty:
        raise ValueError("a figure over seeds needs at least one row")
    names = [str(n) for n in summary.index]
    fig = _figure(2.0 + 0.06 * max(len(n) for n in names) + 3.0 * len(panels), 1.6 + 0.4 * len(names))
    y = np.arange(len(names))[::-1]
    for i, (key, (label, percent)) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), i + 1)
        scale = 100.0 if percent else 1.0
        if zero:
            ax.axvline(0.0, color="0.3", linewidth=0.8)
        for position, (name, row) in zip(y, summary.iterrows(), strict=True):
            if seeds is not None and str(name) in seeds:
                values = seeds[str(name)][key].to_numpy(dtype=np.float64) * scale
                ax.plot(values, np.full(len(values), position), "o", color="0.65", markersize=3)
            if np.isfinite(row[key]):
                low, high = row[f"{key}_low"], row[f"{key}_high"]
                bar = np.array([[row[key] - low], [high - row[key]]]) * scale if np.isfinite(low) else None
                ax.errorbar([row[key] * scale], [position], xerr=bar, fmt="D", color="tab:blue", capsize=3,
                            markersize=5)
        ax.set_yticks(y, names if i == 0 else [""] * len(names))
        ax.set_title(label, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return fig
