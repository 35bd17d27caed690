"""Building the parties of the federated portfolio experiment (paper 000 §8.2).

A market (a bundled dataset, a CSV file or Yahoo) is split by date: its last ``test_days`` trading
days are the held-out period, shared by the parties of that market; they train only on the days
before it.  One market is the paper's setting; with ``parties.markets`` party ``k`` belongs to market
``k % M``, each market with its own calendar and held-out final period (a cross-market federation).
Each party draws ``n_assets`` tickers from its market's pool (:func:`portfed.data.sample_universes`,
independently per party, so universes overlap as in the paper), or trades the tickers
``parties.universes[k]`` given explicitly, gets the private generator
``generators[k % len(generators)]`` wrapped in its own Augmenter, and its own EIIE agent
(:class:`~portfed.experiment.party.party.Party`).  Seeds: party ``k`` uses ``SeedSequence([seed, k])``; the
universes ``SeedSequence([seed, 2**31])``; the initial models are the network built from ``seed``,
shared by every party (``federation.initial_models: shared``), or party k's own network built from its
seed (``per_party``, :func:`initial_parameters`).  A generator that takes a ``seed`` (the GAN) gets the party's seed unless
``generator_params`` sets one.

With a :class:`~portfed.experiment.party.fit_cache.FitCache` a party's fitted generator is loaded from the
cache when an entry for its fingerprint exists (no fit), and a fit is stored there; parties with
the same fingerprint share one fit.  A loaded generator samples exactly what a fitted one does.
"""

from __future__ import annotations

import inspect
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from portfed._progress import progress_bar
from portfed.agents.learner import initial_vector
from portfed.data import DataError, PricePanel, load_market, sample_universes, train_test_split, universe
from portfed.experiment.config import FederatedConfig, FederatedDataSection
from portfed.experiment.party.fit_cache import FitCache, fit_fingerprint
from portfed.experiment.party.party import Party
from portfed.generators import GENERATORS, Augmenter, GeneratorError, make_generator

#: SeedSequence key of the universes' draw (party k uses [seed, k], k < count).
_UNIVERSE_STREAM = 2**31


@dataclass(frozen=True)
class Market:
    """A market's prices (its ticker pool, every date) and its last training close."""

    name: str
    panel: PricePanel
    train_end: pd.Timestamp


@dataclass(frozen=True)
class FitReport:
    """How the parties' generators were obtained: ``fitted`` (fits made), ``loaded`` (restored from a
    fitted state: a fit cache entry, or the fit of a party with the same fingerprint) and the
    wall-clock ``seconds`` of that step (fits and loads, not the market or the agents)."""

    fitted: int = 0
    loaded: int = 0
    seconds: float = 0.0


@dataclass
class Federation:
    """The markets, the parties built from them (the templates every algorithm of a comparison copies:
    :func:`portfed.experiment.runs.federated.run_algorithm` takes the parties it trains explicitly),
    ``party_markets[k]``, the index of party k's market, and how the generators were obtained."""

    markets: list[Market]
    party_markets: list[int]
    parties: list[Party]
    fits: FitReport = FitReport()

    def market_of(self, party: int) -> Market:
        return self.markets[self.party_markets[party]]

    @property
    def market(self) -> PricePanel:
        """The prices of a single-market federation (``ValueError`` for a cross-market one)."""
        return self._single().panel

    @property
    def train_end(self) -> pd.Timestamp:
        """The last training close of a single-market federation (``ValueError`` for a cross-market one)."""
        return self._single().train_end

    def _single(self) -> Market:
        if len(self.markets) != 1:
            raise ValueError(f"a cross-market federation has {len(self.markets)} markets: use market_of(party)")
        return self.markets[0]


def party_seed(seed: int, k: int) -> int:
    """Party ``k``'s seed, ``SeedSequence([seed, k])`` (independent streams per party)."""
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


def load_pool(data: FederatedDataSection) -> PricePanel:
    """The market restricted to the ticker pool of ``data`` (a list, a universe name, or all)."""
    pool = universe(data.pool) if isinstance(data.pool, str) else data.pool
    return load_market(data.source, tickers=pool, start=data.start, end=data.end, **data.options)


def generator_params(config: FederatedConfig, name: str, seed: int) -> dict[str, object]:
    params = dict(config.parties.generator_params.get(name, {}))
    if "seed" in inspect.signature(GENERATORS[name]).parameters and "seed" not in params:
        params["seed"] = seed
    return params


def _augmenter(config: FederatedConfig, name: str, seed: int) -> Augmenter:
    """The unfitted Augmenter of a party with generator ``name`` and seed ``seed``."""
    generator = make_generator(name, **generator_params(config, name, seed))
    return Augmenter(generator, synthetic_days=config.parties.synthetic_days,
                     regenerate_every=config.parties.regenerate_every, seed=seed)


def _fit_augmenter(config: FederatedConfig, name: str, seed: int, own: PricePanel) -> Augmenter:
    """Party data ``own`` with its generator ``name`` fitted (a pure function of its arguments)."""
    return _augmenter(config, name, seed).fit(own)


def _cached_augmenters(config: FederatedConfig, jobs: dict[int, tuple[str, int, PricePanel]], cache: FitCache,
                       advance: Callable[[int], None]) -> tuple[dict[int, Augmenter], int]:
    """Every party's Augmenter, its generator loaded from ``cache`` or fitted (then stored); and the fits made.

    One fit per fingerprint not in the cache (the first party having it); every other party restores
    the fitted state.
    """
    keys = {k: fit_fingerprint(own, _augmenter(config, name, seed).generator) for k, (name, seed, own) in jobs.items()}

    def restorer(k: int) -> Callable[[dict[str, np.ndarray]], Augmenter]:
        name, seed, own = jobs[k]
        return lambda state: _augmenter(config, name, seed).load_fitted_state(own, state)

    done: dict[int, Augmenter] = {}
    todo: dict[str, int] = {}
    for k, key in keys.items():
        if key in todo:
            continue
        loaded = cache.load(key, restorer(k))
        if loaded is None:
            todo[key] = k
        else:
            done[k] = loaded
            advance(1)
    fitted = _fit_augmenters(config, {k: jobs[k] for k in todo.values()}, advance)
    done.update(fitted)
    states = {}
    for k, key in keys.items():
        if k in done:
            if key not in states:  # the party that loaded or fitted this fingerprint's generator
                cache.store(key, done[k].generator_)
                states[key] = done[k].generator_.fitted_state
            continue
        try:
            done[k] = restorer(k)(states[key]())
        except GeneratorError:  # the state cannot be exported (store() warned): fit this party too
            name, seed, own = jobs[k]
            done[k] = _fit_augmenter(config, name, seed, own)
        advance(1)
    return {k: done[k] for k in jobs}, len(fitted)


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


def _market_parties(config: FederatedConfig, m: int) -> tuple[Market, dict[int, PricePanel]]:
    """Market ``m`` and the real training panels of its parties (their universes drawn as in
    :func:`build_federation`, so a party built alone has the universe it has in the whole federation)."""
    section = config.market_sections()[m]
    sizes = config.party_sizes()
    panel = load_pool(section)
    train, _ = train_test_split(panel, section.test_days)
    members = [k for k, (market, _) in enumerate(sizes) if market == m]
    if config.parties.universes is not None:
        universes = [tuple(config.parties.universes[k]) for k in members]
        absent = [(k, t) for k, tickers in zip(members, universes, strict=True) for t in tickers
                  if t not in panel.tickers]
        if absent:
            k, ticker = absent[0]
            raise DataError(f"parties.universes[{k}]: ticker {ticker!r} is not in party {k}'s market "
                            f"{section.source!r} (pool of {len(panel.tickers)} tickers)", ticker=ticker)
    else:
        stream = [config.seed, _UNIVERSE_STREAM] + ([m] if m else [])
        universes = sample_universes(panel.tickers, len(members), sizes[members[0]][1],
                                     np.random.default_rng(np.random.SeedSequence(stream)))
    owns = {k: train.select(list(tickers)) for k, tickers in zip(members, universes, strict=True)}
    return Market(section.source, panel, train.dates[-1]), owns


def _build_parties(config: FederatedConfig, owns: dict[int, PricePanel], progress: bool,
                   cache: FitCache | None) -> tuple[dict[int, Party], FitReport]:
    """The parties of ``owns`` (index → real training panel), their generators fitted or loaded from ``cache``."""
    spec = config.parties
    seeds = {k: party_seed(config.seed, k) for k in owns}
    names = {k: spec.generators[k % len(spec.generators)] for k in owns}
    jobs = {k: (names[k], seeds[k], owns[k]) for k in owns if names[k] is not None}
    with progress_bar("building parties (fitting generators)", total=len(owns), enabled=progress) as advance:
        advance(len(owns) - len(jobs))
        start = time.perf_counter()
        if cache is None:
            augmenters, n_fitted = _fit_augmenters(config, jobs, advance), len(jobs)
        else:
            augmenters, n_fitted = _cached_augmenters(config, jobs, cache, advance)
        fits = FitReport(fitted=n_fitted, loaded=len(jobs) - n_fitted, seconds=time.perf_counter() - start)
    agent = config.agent_config()
    parties = {k: Party(k, owns[k], agent, seeds[k], augmenters.get(k)) for k in sorted(owns)}
    return parties, fits


def build_federation(config: FederatedConfig, progress: bool = True, cache: FitCache | None = None) -> Federation:
    """Load the market(s), draw the universes and build every party (fitting its private generator).

    The generators are fitted in ``config.fit_workers`` processes (same parties for any number);
    with a ``cache``, only those it does not hold (:mod:`portfed.experiment.party.fit_cache`).
    """
    markets, owns = [], {}
    for m in range(len(config.market_sections())):
        market, members = _market_parties(config, m)
        markets.append(market)
        owns.update(members)
    parties, fits = _build_parties(config, owns, progress, cache)
    return Federation(markets=markets, party_markets=[m for m, _ in config.party_sizes()],
                      parties=[parties[k] for k in range(config.parties.count)], fits=fits)


def build_party(config: FederatedConfig, k: int, cache: FitCache | None = None) -> tuple[Market, Party]:
    """Party ``k`` alone, as :func:`build_federation` builds it (same universe, generator and seed),
    training in a one-party engine of its own, and its market: what a party on its own machine needs
    (:mod:`portfed.flower.node`).  Only its market is loaded and only its generator fitted.
    """
    count = config.parties.count
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k < count:
        raise ValueError(f"party must be an integer in [0, {count - 1}], got {k!r}")
    market, owns = _market_parties(config, config.party_sizes()[k][0])
    parties, _ = _build_parties(config, {k: owns[k]}, False, cache)
    return market, parties[k]


def party_universe(config: FederatedConfig, k: int) -> tuple[Market, tuple[str, ...]]:
    """Party ``k``'s market and universe (its tickers in order), drawn as :func:`build_federation` draws
    them, without building the party (no generator fitted): what a trained party's model is fed."""
    count = config.parties.count
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k < count:
        raise ValueError(f"party must be an integer in [0, {count - 1}], got {k!r}")
    market, owns = _market_parties(config, config.party_sizes()[k][0])
    return market, owns[k].tickers


#: The file of a run directory that names every party's data: :func:`party_table`.
PARTIES_FILE = "parties.csv"


def party_table(config: FederatedConfig) -> pd.DataFrame:
    """One row per party: its market (index and source), generator, tickers (space-separated, in the
    model's order), first date, last training date and last held-out date — what ``parties.csv`` of a
    run directory records.  Loads the markets and draws the universes; fits nothing."""
    generators = config.parties.generators
    rows = []
    for m in range(len(config.market_sections())):
        market, owns = _market_parties(config, m)
        for k, own in owns.items():
            rows.append({"party": k, "market": m, "source": market.name, "generator": generators[k % len(generators)],
                         "n_assets": len(own.tickers), "tickers": " ".join(own.tickers),
                         "first_date": own.dates[0].date(), "train_end": market.train_end.date(),
                         "test_end": market.panel.dates[-1].date()})
    return pd.DataFrame(rows).sort_values("party", ignore_index=True)


def initial_parameters(config: FederatedConfig) -> np.ndarray:
    """The parties' initial models ``W^0``.

    ``federation.initial_models: shared``: ``(d,)``, the network built from ``config.seed``, one ``w^0``
    for every party.  ``per_party``: ``(N, d)``, row k the network party k builds from its own seed
    (:func:`party_seed`, the seed of its trainer, so row k is the model its trainer starts with) —
    paper 000 Alg. 1 line 1, "each party k sends its initial model w_k^0"; the server's first model
    ``w̃^0 = 𝒜(W^0)`` is computed from them by :meth:`FederationState.initial`.
    """
    agent = config.agent_config()
    if config.federation.initial_models == "per_party":
        return np.stack([initial_vector(agent, party_seed(config.seed, k)) for k in range(config.parties.count)])
    return initial_vector(agent, config.seed)
