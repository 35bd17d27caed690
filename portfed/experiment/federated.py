"""The federated portfolio experiment (paper 000 §8.2): N parties, T rounds, one algorithm per sub-run.

**Parties.**  One market (a bundled dataset, a CSV file or Yahoo) is split by date: the last
``test_days`` trading days are the held-out period, shared by every party; parties train only on
the days before it.  Each party draws ``n_assets`` tickers from the pool
(:func:`portfed.data.sample_universes`, independently per party, so universes overlap as in the
paper), gets the private generator ``generators[k % len(generators)]`` wrapped in its own
Augmenter, and its own EIIE agent (:class:`~portfed.experiment.party.Party`).  Seeds: party ``k``
uses ``SeedSequence([seed, k])``; the universes ``SeedSequence([seed, 2**31])``; the common initial
model ``w^0`` is the network built from ``seed``.  A generator that takes a ``seed`` (the GAN) gets the
party's seed unless ``generator_params`` sets one.

**Rounds.**  ``rounds`` rounds of ``local_steps`` local iterations, with the engine of
``federation.engine``: ``batched`` — :func:`portfed.federation.run_rounds_batched` over a
:class:`~portfed.experiment.party.PartyGroup` (the parties' agents are slots of one batched trainer;
each party's Augmenter still decides its regenerations and hands its panel to its slot) — or
``per_party`` — :func:`portfed.federation.run_rounds` over the parties' own trainers.  Either way the
federation layer sees parameter vectors and the parties' local-training call only.  Every ``checkpoint_every`` rounds (and after the last) the federation state,
every party's state and the records so far are saved atomically; a resumed run continues from the
last checkpoint bit for bit.  After each round listed in ``diagnostics.interpolation_rounds`` the
party models ``w_k``, the models the server sent them ``r_k`` (``w̃``, FedAMP: ``u_k``) and the
previous round's ``w̃`` are saved for paper 000 Fig. 1c.

**Deployed model.**  After the last round every party deploys the model it would start its next
local training from once the server's last message has reached it (paper 003 Alg. 1 line 18):

    ŵ_k = (1 − λ_T) w_k + λ_T r_k,

with λ_T the algorithm's λ in round T.  So FedAvg, FedProx, RFA, coordinate median and FedMGDA+
(λ = 1) deploy the global model w̃; local training, FedAMP and the Fed+ variants with λ = 0 deploy the
party's own (personalized) model w_k; the paper's Fed+ setting λ = 0.001 deploys
``0.999 w_k + 0.001 w̃``.

**Backtest.**  Each party's deployed model trades its universe over the held-out period through
:class:`~portfed.envs.PortfolioEnv` with the exact transaction costs; the first decision is at the
close of the last training day (its window is training history), so every price relative of the
held-out period is traded.  The baselines run through the same environment once per party
(:func:`backtest_baselines`).

Outputs of a sub-run directory: ``rounds.csv`` (one row per round and party: training reward, mean and
std of ``|Δ parameters|`` across the aggregation step, change over the round, distance to the global
model, the server's iterations and convergence), ``learning_curve.csv`` (party averages per round),
``snapshots/round_XXXX.npz``, ``interpolation.csv``, ``models.npz``, ``party_metrics.csv``,
``portfolio_values.csv`` and ``checkpoint.pt``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from portfed._io import atomic_save
from portfed.agents import make_baselines
from portfed.agents.networks import build_network, flat_parameters
from portfed.data import PricePanel, load_market, sample_universes, train_test_split, universe
from portfed.envs import PortfolioEnv
from portfed.evaluation import BacktestResult, backtest, backtest_all
from portfed.experiment.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from portfed.experiment.config import FederatedConfig
from portfed.experiment.party import Party, PartyGroup
from portfed.experiment.progress import progress_bar
from portfed.federation import AlgorithmSpec, FederationState, RoundRecord, make_algorithm, run_rounds
from portfed.federation.batched import run_rounds_batched
from portfed.generators import GENERATORS, Augmenter, make_generator

logger = logging.getLogger(__name__)

#: SeedSequence key of the universes' draw (party k uses [seed, k], k < count).
_UNIVERSE_STREAM = 2**31
SNAPSHOT_DIR = "snapshots"


# ---------------------------------------------------------------------- building the parties
@dataclass
class Federation:
    """The market, the date of the last training close, and the parties built from them."""

    market: PricePanel
    train_end: pd.Timestamp
    parties: list[Party]


def party_seed(seed: int, k: int) -> int:
    """Party ``k``'s seed, ``SeedSequence([seed, k])`` (independent streams per party)."""
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


def load_pool(config: FederatedConfig) -> PricePanel:
    """The market restricted to the ticker pool of ``config.data`` (a list, a universe name, or all)."""
    data = config.data
    pool = universe(data.pool) if isinstance(data.pool, str) else data.pool
    return load_market(data.source, tickers=pool, start=data.start, end=data.end, **data.options)


def _generator_params(config: FederatedConfig, name: str, seed: int) -> dict[str, object]:
    params = dict(config.parties.generator_params.get(name, {}))
    if "seed" in inspect.signature(GENERATORS[name]).parameters and "seed" not in params:
        params["seed"] = seed
    return params


def _fit_augmenter(config: FederatedConfig, name: str, seed: int, own: PricePanel) -> Augmenter:
    """Party data ``own`` with its generator ``name`` fitted (a pure function of its arguments)."""
    generator = make_generator(name, **_generator_params(config, name, seed))
    return Augmenter(generator, own, synthetic_days=config.parties.synthetic_days,
                     regenerate_every=config.parties.regenerate_every, seed=seed)


def _fit_augmenters(config: FederatedConfig, jobs: dict[int, tuple[str, int, PricePanel]],
                    advance: Callable[[int], None]) -> dict[int, Augmenter]:
    """Every party's fitted Augmenter, in ``config.fit_workers`` processes when that is more than one.

    Each fit is seeded by its party's seed alone (the GAN trains with one torch thread whatever the
    process), so the results do not depend on the number of workers.  Workers are spawned (a fork
    of a process that has run torch can deadlock in its thread pool) with
    ``max(1, config.threads() // workers)`` torch threads each.
    """
    workers = min(config.fit_workers, len(jobs))
    if workers <= 1:
        fitted = {}
        for k, (name, seed, own) in jobs.items():
            fitted[k] = _fit_augmenter(config, name, seed, own)
            advance(1)
        return fitted
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=torch.set_num_threads,
                             initargs=(max(1, config.threads() // workers),)) as pool:
        futures = {pool.submit(_fit_augmenter, config, name, seed, own): k for k, (name, seed, own) in jobs.items()}
        fitted = {}
        for future in as_completed(futures):
            fitted[futures[future]] = future.result()
            advance(1)
    return fitted


def build_federation(config: FederatedConfig, progress: bool = True) -> Federation:
    """Load the market, draw the universes and build every party (fitting its private generator).

    The generators are fitted in ``config.fit_workers`` processes (same parties for any number).
    """
    market = load_pool(config)
    train, _ = train_test_split(market, config.data.test_days)
    spec = config.parties
    universes = sample_universes(market.tickers, spec.count, spec.n_assets,
                                 np.random.default_rng(np.random.SeedSequence([config.seed, _UNIVERSE_STREAM])))
    owns = [train.select(list(tickers)) for tickers in universes]
    seeds = [party_seed(config.seed, k) for k in range(spec.count)]
    names = [spec.generators[k % len(spec.generators)] for k in range(spec.count)]
    jobs = {k: (name, seeds[k], owns[k]) for k, name in enumerate(names) if name is not None}
    with progress_bar("building parties (fitting generators)", total=spec.count, enabled=progress) as advance:
        advance(spec.count - len(jobs))
        augmenters = _fit_augmenters(config, jobs, advance)
    agent = config.agent_config()
    parties = [Party(k, owns[k], agent, seeds[k], augmenters.get(k), engine=config.engine()) for k in range(spec.count)]
    return Federation(market=market, train_end=train.dates[-1], parties=parties)


def initial_parameters(config: FederatedConfig) -> np.ndarray:
    """``w^0``: the flat parameters of the network built from ``config.seed``, shared by every party."""
    return flat_parameters(build_network(config.agent_config(), config.seed))


# ---------------------------------------------------------------------- one algorithm
@dataclass
class AlgorithmRun:
    """What one algorithm's sub-run produced (also written to its directory)."""

    algorithm: str
    rounds: pd.DataFrame
    curve: pd.DataFrame
    interpolation: pd.DataFrame
    party_metrics: pd.DataFrame
    values: pd.DataFrame
    deployed: np.ndarray


def make_spec(config: FederatedConfig, algorithm: str) -> AlgorithmSpec:
    return make_algorithm(algorithm, **config.federation.algorithm_params.get(algorithm, {}))


def run_fingerprint(config: FederatedConfig, algorithm: str) -> str:
    """A hash of everything the rounds of ``algorithm`` depend on (``rounds`` itself may grow on resume)."""
    fed = config.federation
    key = {
        "algorithm": algorithm,
        "params": fed.algorithm_params.get(algorithm, {}),
        "local_steps": fed.local_steps,
        "parties_per_round": fed.parties_per_round,
        "engine": config.engine(),  # the engines agree to round-off, not bit for bit
        **config.model_dump(mode="json", include={"seed", "data", "parties", "agent"}),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def references(spec: AlgorithmSpec, state: FederationState) -> np.ndarray:
    """``(N, d)``: the model the server sends each party — its FedAMP centre ``u_k``, else ``w̃``."""
    if spec.personalized_centers:
        return state.centers.copy()  # type: ignore[union-attr]
    return np.broadcast_to(state.global_model, state.party_models.shape).copy()


def deployed_models(spec: AlgorithmSpec, state: FederationState) -> np.ndarray:
    """``ŵ_k = (1 − λ_T) w_k + λ_T r_k`` for every party (see the module docstring)."""
    lam = spec.lam.at(state.round_index)
    return (1.0 - lam) * state.party_models + lam * references(spec, state)


def run_algorithm(
    config: FederatedConfig,
    algorithm: str,
    federation: Federation,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
) -> AlgorithmRun:
    """Train ``federation.parties`` (fresh, or resumed from ``out_dir``'s checkpoint) with ``algorithm``.

    Without ``resume`` a previous checkpoint in ``out_dir`` is deleted first, so a fresh run that is
    interrupted can never be resumed from a stale one.  With ``resume`` and no checkpoint the run
    starts at round 0.

    Raises:
        CheckpointError: the checkpoint belongs to another config or algorithm.
    """
    spec = make_spec(config, algorithm)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parties, fed = federation.parties, config.federation
    checkpoint, fingerprint = out / CHECKPOINT_NAME, run_fingerprint(config, algorithm)
    rows: list[dict[str, object]] = []
    # Batched: the parties train in the slots of one engine (attached here on their first run).
    group = PartyGroup(parties) if config.engine() == "batched" else None
    if resume and checkpoint.exists():
        saved = load_checkpoint(checkpoint, fingerprint)
        state = FederationState.from_state_dict(saved["federation"])
        for party, party_state in zip(parties, saved["parties"], strict=True):
            party.load_state_dict(party_state)
        rows = list(saved["rows"])
        logger.info("%s: resuming after round %d", algorithm, state.round_index)
    else:
        if resume:
            logger.info("%s: no checkpoint in %s, starting at round 0", algorithm, out)
        checkpoint.unlink(missing_ok=True)
        state = FederationState.initial(spec, initial_parameters(config), len(parties), config.seed)

    previous_global = state.global_model.copy()

    def after_round(t: int, current: FederationState, record: RoundRecord) -> None:
        nonlocal previous_global
        rows.extend(record.rows())
        if t in config.diagnostics.interpolation_rounds:
            _save_snapshot(out / SNAPSHOT_DIR / f"round_{t:04d}.npz", current.party_models,
                           references(spec, current), previous_global)
        previous_global = current.global_model.copy()
        if (t + 1) % fed.checkpoint_every == 0 or t + 1 == fed.rounds:
            save_checkpoint(checkpoint, fingerprint, {"federation": current.state_dict(),
                                                      "parties": [p.state_dict() for p in parties], "rows": rows})

    options = {"k_per_round": fed.parties_per_round, "seed": config.seed, "init_params": state.party_models,
               "callback": after_round, "progress": progress, "state": state}
    if group is not None:
        final = run_rounds_batched(group, spec, fed.rounds, fed.local_steps, **options).state
    else:
        final = run_rounds(parties, spec, fed.rounds, fed.local_steps, **options).state
    deployed = deployed_models(spec, final)
    atomic_save(out / "models.npz", lambda p: _write_npz(p, party_models=final.party_models,
                                                         global_model=final.global_model, deployed=deployed))
    rounds = pd.DataFrame(rows)
    curve = learning_curve(rounds)
    interpolation = interpolation_curves(config, parties, out, progress)
    metrics, values = backtest_agents(config, federation, deployed, algorithm, progress)
    for name, frame, index in (("rounds", rounds, False), ("learning_curve", curve, False),
                               ("interpolation", interpolation, False), ("party_metrics", metrics, False),
                               ("portfolio_values", values, True)):
        atomic_save(out / f"{name}.csv", lambda p, f=frame, i=index: f.to_csv(p, index=i))
    return AlgorithmRun(algorithm, rounds, curve, interpolation, metrics, values, deployed)


def _write_npz(path: Path, **arrays: np.ndarray) -> None:
    with open(path, "wb") as handle:  # a file handle: np.savez would append ".npz" to a bare path
        np.savez(handle, **arrays)


def _save_snapshot(path: Path, party_models: np.ndarray, refs: np.ndarray, previous_global: np.ndarray) -> None:
    atomic_save(path, lambda p: _write_npz(p, party_models=party_models, references=refs,
                                           previous_global=previous_global))


def load_snapshot(path: str | Path) -> dict[str, np.ndarray]:
    """``party_models`` ``(N, d)``, ``references`` ``(N, d)`` and ``previous_global`` ``(d,)`` of one round."""
    with np.load(path) as data:
        return {key: data[key] for key in ("party_models", "references", "previous_global")}


# ---------------------------------------------------------------------- records and diagnostics
def learning_curve(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per round: party means (and the std of the reward) of the per-party records (paper 000 Fig. 1a, 1b).

    ``aggregation_change_mean`` is the party mean of each party's mean ``|Δ parameters|`` across the
    aggregation step, ``aggregation_change_std`` the party mean of its std over the coordinates.
    Inactive parties (NaN records) are skipped.
    """
    grouped = rounds.groupby("round", sort=True)
    return pd.DataFrame({
        "round": grouped.size().index,
        "train_reward": grouped["train_reward"].mean().to_numpy(),
        "train_reward_std": grouped["train_reward"].std(ddof=0).to_numpy(),
        "aggregation_change_mean": grouped["aggregation_change_mean"].mean().to_numpy(),
        "aggregation_change_std": grouped["aggregation_change_std"].mean().to_numpy(),
        "round_change_mean": grouped["round_change_mean"].mean().to_numpy(),
        "distance_to_global": grouped["distance_to_global"].mean().to_numpy(),
        "aggregator_iterations": grouped["aggregator_iterations"].first().to_numpy(),
        "aggregator_converged": grouped["aggregator_converged"].first().to_numpy(),
    })


def interpolation_curves(config: FederatedConfig, parties: Sequence[Party], out: Path,
                         progress: bool = True) -> pd.DataFrame:
    """Paper 000 Fig. 1c: each party's local performance along ``(1 − λ) w_k + λ r_k`` at the chosen rounds.

    One row per (round, party, λ): ``log_return`` = :meth:`Party.evaluate_log_return` of the
    interpolated model on the party's own training data, and ``previous_global_log_return`` the same
    for the previous round's global model (the paper's dashed line).
    """
    diag = config.diagnostics
    lams = np.linspace(0.0, 1.0, diag.interpolation_points)
    rows = []
    total = len(diag.interpolation_rounds) * len(parties)
    with progress_bar("local performance along w_k → w̃", total=total, enabled=progress and total > 0) as advance:
        for t in sorted(diag.interpolation_rounds):
            snap = load_snapshot(out / SNAPSHOT_DIR / f"round_{t:04d}.npz")
            for k, party in enumerate(parties):
                before = party.evaluate_log_return(snap["previous_global"], diag.interpolation_days)
                w, r = snap["party_models"][k], snap["references"][k]
                for lam in lams:
                    rows.append({"round": t, "party": k, "lam": float(lam),
                                 "log_return": party.evaluate_log_return((1 - lam) * w + lam * r,
                                                                         diag.interpolation_days),
                                 "previous_global_log_return": before})
                advance(1)
    return pd.DataFrame(rows, columns=["round", "party", "lam", "log_return", "previous_global_log_return"])


# ---------------------------------------------------------------------- backtests
def _environment(config: FederatedConfig, federation: Federation, party: Party) -> PortfolioEnv:
    agent = party.agent_config
    panel = federation.market.select(list(party.tickers)).select_features(agent.features)
    return PortfolioEnv(panel, window_size=agent.window, commission=agent.commission,
                        cost_model=config.evaluation.cost_model, start=federation.train_end)


def _metric_rows(strategy: str, party: int, result: BacktestResult) -> dict[str, object]:
    return {"strategy": strategy, "party": party, "hindsight": result.hindsight, **result.summary()}


def _value_columns(results: dict[tuple[str, int], BacktestResult]) -> pd.DataFrame:
    frame = pd.DataFrame({f"{name}/party_{k}": r.value_series for (name, k), r in results.items()})
    frame.index.name = "date"
    return frame


def backtest_agents(config: FederatedConfig, federation: Federation, deployed: np.ndarray, algorithm: str,
                    progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Backtest party ``k``'s deployed model ``deployed[k]`` on its held-out period, for every party.

    Returns:
        per-party metrics (one row per party, :func:`portfed.evaluation.summarize` columns) and the
        portfolio values (dates × ``"<algorithm>/party_<k>"``).
    """
    results: dict[tuple[str, int], BacktestResult] = {}
    with progress_bar(f"backtest {algorithm}", total=len(federation.parties), enabled=progress) as advance:
        for k, party in enumerate(federation.parties):
            results[algorithm, k] = backtest(party.policy(deployed[k], algorithm),
                                             _environment(config, federation, party))
            advance(1)
    metrics = pd.DataFrame([_metric_rows(name, k, r) for (name, k), r in results.items()])
    return metrics, _value_columns(results)


def backtest_baselines(config: FederatedConfig, federation: Federation,
                       progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The baselines of ``config.evaluation`` on every party's universe and held-out period."""
    results: dict[tuple[str, int], BacktestResult] = {}
    with progress_bar("backtest baselines", total=len(federation.parties), enabled=progress) as advance:
        for k, party in enumerate(federation.parties):
            close = federation.market.select(list(party.tickers)).close
            policies = make_baselines(close, federation.train_end, names=config.evaluation.baselines)
            for name, result in backtest_all(policies, lambda p=party: _environment(config, federation, p)).items():
                results[name, k] = result
            advance(1)
    metrics = pd.DataFrame([_metric_rows(name, k, r) for (name, k), r in results.items()])
    return metrics, _value_columns(results)
