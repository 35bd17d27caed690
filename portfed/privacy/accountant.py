"""The privacy accountant: ε at δ of a run's rounds, from Google's ``dp-accounting`` (the ``privacy`` extra).

**Which accountant.**  The Rényi-DP accountant (``dp_accounting.rdp.RdpAccountant``; Mironov 2017,
Mironov, Talwar & Zhang 2019 for the sampled Gaussian) — the moments accountant McMahan et al. 2018
used for DP-FedAvg.  RDP composes additively, so the ε after every round (``rounds.csv``) and the
search for ``z`` that meets ``target_epsilon`` cost milliseconds; its ε is an upper bound, a few
tens of percent above the tight PLD one at the usual settings (so the reported ε is conservative).

**Central mode** (the run's ε): one round is ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` with
``q = K/N`` (``GaussianDpEvent(z)`` alone when every party takes part), composed ``T`` times, under
add-or-remove-one-party adjacency (sensitivity ``S/K`` of the fixed-denominator mean, noise ``zS/K``:
multiplier z).  portfed samples exactly K of the N parties uniformly without replacement (seeded);
Poisson sampling with the same rate is the standard approximation of that fixed-size sample (as in
McMahan et al. 2018 and TF Privacy's reports); it is not a proof for fixed-size sampling.

**Local mode** (each party's own ε): party k's message carries noise ``zS`` on an update of norm ≤ S,
a Gaussian mechanism with multiplier z under the same unit (the party's update against none, zero-out
adjacency; against two arbitrary datasets of the party the sensitivity is 2S, the ε of multiplier
z/2).  The untrusted server chose who takes part, so sampling amplifies nothing: party k's ε after
``c_k`` messages is ``GaussianDpEvent(z)`` composed ``c_k`` times, and the run reports the largest
over parties.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np

#: The noise multipliers :func:`calibrate` searches.  Above 1000 the noise on the mean (std 1000·S/K per
#: coordinate) dwarfs every update (norm ≤ S): a target that needs more is refused as out of reach, not run
#: as pure noise.  Below 0.01 the run is all but non-private; such a target is refused too.
MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER = 0.01, 1000.0


def _library() -> Any:
    try:
        import dp_accounting
    except ImportError:  # pragma: no cover - the privacy extra is part of dev
        raise ValueError("privacy needs the dp-accounting library: pip install 'portfed[privacy]'") from None
    return dp_accounting


def accountant_name() -> str:
    """The accountant as the outputs name it, with the installed library's version."""
    from importlib.metadata import version

    return f"RDP (dp-accounting {version('dp-accounting')})"


def round_event(noise_multiplier: float, sampling: float) -> Any:
    """One round's ``DpEvent``: the Gaussian with multiplier ``noise_multiplier``, Poisson-sampled at rate
    ``sampling`` when it is below 1 (module docstring)."""
    dp = _library()
    gaussian = dp.GaussianDpEvent(noise_multiplier)
    return gaussian if sampling >= 1.0 else dp.PoissonSampledDpEvent(sampling, gaussian)


@contextmanager
def _quiet_library() -> Iterator[None]:
    """The library logs (absl, WARNING) each RDP order whose series it drops; dropping an order can only raise
    the minimum over orders, ε, so the warnings say nothing a run needs: kept to ERROR while we call it."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


@lru_cache(maxsize=256)
def _one_round(noise_multiplier: float, sampling: float) -> tuple[np.ndarray, np.ndarray]:
    """The RDP orders and one round's RDP of :func:`round_event` (the accountant's, composed once)."""
    with _quiet_library():
        accountant = _library().rdp.RdpAccountant().compose(round_event(noise_multiplier, sampling))
    return accountant.orders, accountant.rdp


@lru_cache(maxsize=4096)
def epsilon(noise_multiplier: float, sampling: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` after ``rounds`` rounds of :func:`round_event` (0 before any round, ``inf`` without noise).

    The library's ``RdpAccountant.compose(event, rounds).get_epsilon(delta)``, computed as it does (RDP of
    ``rounds`` rounds = ``rounds`` × one round's, then its conversion) from one round's RDP kept in memory, so
    that the ε of every round of a run costs one conversion."""
    if rounds == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    orders, rdp = _one_round(noise_multiplier, sampling)
    return float(_library().rdp.rdp_privacy_accountant.compute_epsilon(orders, rounds * rdp, delta)[0])


@lru_cache(maxsize=256)
def calibrate(target_epsilon: float, sampling: float, rounds: int, delta: float) -> float:
    """The smallest noise multiplier z in [:data:`MIN_NOISE_MULTIPLIER`, :data:`MAX_NOISE_MULTIPLIER`] whose ε after
    ``rounds`` rounds at ``sampling`` is at most ``target_epsilon`` (``dp_accounting.mechanism_calibration``'s
    search, within 1e-6 and on the safe side: ε(z) ≤ target).

    Raises:
        ValueError: one line, when the target needs more noise than ``MAX_NOISE_MULTIPLIER`` (out of reach: the
            aggregate would be noise) or less than ``MIN_NOISE_MULTIPLIER`` (give ``noise_multiplier`` instead).
    """
    if not 0 < target_epsilon < math.inf or rounds < 1:
        raise ValueError(f"privacy.target_epsilon must be a finite number > 0 for at least one round, got "
                         f"{target_epsilon!r} over {rounds} rounds")
    dp = _library()
    floor = epsilon(MAX_NOISE_MULTIPLIER, sampling, rounds, delta)
    if target_epsilon < floor:
        raise ValueError(f"privacy.target_epsilon = {target_epsilon:g} is out of reach: over {rounds} rounds at "
                         f"sampling rate {sampling:g} even noise multiplier z = {MAX_NOISE_MULTIPLIER:g} gives ε = "
                         f"{floor:.3g} at δ = {delta:g}; raise target_epsilon or delta, or run fewer rounds")
    if target_epsilon >= epsilon(MIN_NOISE_MULTIPLIER, sampling, rounds, delta):
        raise ValueError(f"privacy.target_epsilon = {target_epsilon:g} is met with noise multiplier below "
                         f"{MIN_NOISE_MULTIPLIER:g}; give privacy.noise_multiplier instead")
    with _quiet_library():
        return float(dp.calibrate_dp_mechanism(
            dp.rdp.RdpAccountant, lambda z: dp.SelfComposedDpEvent(round_event(z, sampling), rounds),
            target_epsilon, delta, dp.ExplicitBracketInterval(MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER)))
