"""Diagnostics of a federated run: learning curves (paper 000 Fig. 1a, 1b) and Fig. 1c's interpolation.

After each round listed in ``diagnostics.interpolation_rounds`` the runner saves the party models
``w_k``, the models the server sent them ``r_k`` (``w̃``, FedAMP: ``u_k``) and the previous round's
``w̃`` (:func:`save_snapshot`); :func:`interpolation_curves` evaluates every party's local performance
along ``(1 − λ) w_k + λ r_k`` from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_save
from portfed._progress import progress_bar
from portfed.experiment.config import FederatedConfig
from portfed.experiment.party.party import Party

SNAPSHOT_DIR = "snapshots"


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` of ``arrays`` to exactly ``path`` (use inside :func:`portfed._io.atomic_save`)."""
    with open(path, "wb") as handle:  # a file handle: np.savez would append ".npz" to a bare path
        np.savez(handle, **arrays)


def snapshot_path(out: Path, round_index: int) -> Path:
    return out / SNAPSHOT_DIR / f"round_{round_index:04d}.npz"


def save_snapshot(path: Path, party_models: np.ndarray, refs: np.ndarray, previous_global: np.ndarray) -> None:
    atomic_save(path, lambda p: write_npz(p, party_models=party_models, references=refs,
                                          previous_global=previous_global))


def load_snapshot(path: str | Path) -> dict[str, np.ndarray]:
    """``party_models`` ``(N, d)``, ``references`` ``(N, d)`` and ``previous_global`` ``(d,)`` of one round."""
    with np.load(path) as data:
        return {key: data[key] for key in ("party_models", "references", "previous_global")}


def learning_curve(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per round: party means (and the std of the reward) of the per-party records (paper 000 Fig. 1a, 1b).

    ``aggregation_change_mean`` is the party mean of each party's mean ``|Δ parameters|`` across the
    aggregation step, ``aggregation_change_std`` the party mean of its std over the coordinates; the
    per-network columns of an actor-critic run (``aggregation_change_mean_actor``, ``…_critic``,
    ``round_change_mean_…``; :func:`~portfed.agents.learner.network_parts`) are party means too, and so is
    ``train_cash``, the cash weight the parties' policies chose in their local steps (NaN for rounds
    recorded before portfed kept it, and for tasks without portfolios).  Inactive parties (NaN records)
    are skipped.
    """
    grouped = rounds.groupby("round", sort=True)
    parts = [c for c in rounds.columns if c.startswith(("aggregation_change_mean_", "round_change_mean_"))]
    return pd.DataFrame({
        "round": grouped.size().index,
        "train_reward": grouped["train_reward"].mean().to_numpy(),
        "train_reward_std": grouped["train_reward"].std(ddof=0).to_numpy(),
        "train_cash": (grouped["train_cash"].mean().to_numpy() if "train_cash" in rounds.columns
                       else np.full(grouped.ngroups, np.nan)),
        "aggregation_change_mean": grouped["aggregation_change_mean"].mean().to_numpy(),
        "aggregation_change_std": grouped["aggregation_change_std"].mean().to_numpy(),
        "round_change_mean": grouped["round_change_mean"].mean().to_numpy(),
        "distance_to_global": grouped["distance_to_global"].mean().to_numpy(),
        "aggregator_iterations": grouped["aggregator_iterations"].first().to_numpy(),
        "aggregator_converged": grouped["aggregator_converged"].first().to_numpy(),
        **{column: grouped[column].mean().to_numpy() for column in parts},
    })


INTERPOLATION_COLUMNS = ["round", "party", "lam", "log_return", "previous_global_log_return"]


def party_interpolation(config: FederatedConfig, party: Party, round_index: int, model: np.ndarray,
                        reference: np.ndarray, previous_global: np.ndarray) -> list[dict[str, float]]:
    """One party's rows of Fig. 1c at round ``round_index``: :meth:`Party.evaluate_log_return` of
    ``(1 − λ) model + λ reference`` on its own training data for each λ, and of ``previous_global``."""
    diag = config.diagnostics
    lams = np.linspace(0.0, 1.0, diag.interpolation_points)
    models = np.stack([*((1 - lam) * model + lam * reference for lam in lams), previous_global])
    returns = party.evaluate_log_returns(models, diag.interpolation_days)  # one batched rollout of every model
    return [{"round": round_index, "party": party.index, "lam": float(lam), "log_return": float(value),
             "previous_global_log_return": float(returns[-1])}
            for lam, value in zip(lams, returns[:-1], strict=True)]


def diagnostic_cost(config: FederatedConfig, parties: int) -> str:
    """What Fig. 1c costs one algorithm, announced as its progress description: rounds × parties ×
    (``interpolation_points`` + 1) greedy passes over ``interpolation_days`` days — one pass per λ and one
    for the previous global model, each as long as a backtest of that many days."""
    diag = config.diagnostics
    rounds = len(diag.interpolation_rounds)
    days = "all training" if diag.interpolation_days is None else str(diag.interpolation_days)
    passes = rounds * parties * (diag.interpolation_points + 1)
    return (f"Fig. 1c diagnostic: {rounds} rounds × {parties} parties × {diag.interpolation_points + 1} models = "
            f"{passes} greedy passes over {days} days")


def interpolation_curves(config: FederatedConfig, parties: Sequence[Party], out: Path,
                         progress: bool = True) -> pd.DataFrame:
    """Paper 000 Fig. 1c: each party's local performance along ``(1 − λ) w_k + λ r_k`` at the chosen rounds.

    One row per (round, party, λ): ``log_return`` = :meth:`Party.evaluate_log_return` of the
    interpolated model on the party's own training data, and ``previous_global_log_return`` the same
    for the previous round's global model (the paper's dashed line); :func:`party_interpolation`.
    """
    rounds = sorted(config.diagnostics.interpolation_rounds)
    rows = []
    total = len(rounds) * len(parties)
    with progress_bar(diagnostic_cost(config, len(parties)), total=total, enabled=progress and total > 0) as advance:
        for t in rounds:
            snap = load_snapshot(snapshot_path(out, t))
            for k, party in enumerate(parties):
                rows.extend(party_interpolation(config, party, t, snap["party_models"][k], snap["references"][k],
                                                snap["previous_global"]))
                advance(1)
    return pd.DataFrame(rows, columns=INTERPOLATION_COLUMNS)
