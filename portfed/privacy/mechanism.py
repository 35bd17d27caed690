"""Party-level differential privacy of what the parties share: clipping and Gaussian noise.

The unit is a **party** (all of its data, every round): McMahan et al. 2018, "Learning differentially
private recurrent language models" (DP-FedAvg, Alg. 1 with the fixed-denominator estimator
``f̃_f``).  The vector clipped is party k's **update**, the model it shares minus the server model it
was sent at the start of the round::

    Δ_k = w_k − r_k,   clip_S(Δ_k) = Δ_k · min(1, S / ‖Δ_k‖₂)

(``r_k`` is ``w̃``, or party k's own cloud model for FedAMP; for Fed+ variants, whose parties start
from their own model, ``Δ_k`` is the party's distance from ``w̃`` after training, which is what the
server would otherwise learn).  A row with ``‖Δ_k‖ ≤ S`` is passed on unchanged, bit for bit.

- **central** (trusted server): ``w̃ ← w̃ + (1/K) Σ_{k ∈ used} clip_S(Δ_k) + N(0, (zS/K)² I)``, with
  ``K`` the **planned** cohort size (``parties_per_round``, or N) as fixed denominator — a missing or
  quarantined reply counts as a zero update, so adding or removing one party moves the sum by at most
  ``S`` and the mean by at most ``S/K`` whoever replied — and uniform weights.  It is computed as the
  uniform mean of the K rows ``r + clip_S(Δ_k)`` (a missing row is ``w̃`` itself), so with ``z = 0``
  and ``S = ∞`` and every reply used it is the non-private mean bit for bit.
- **local** (untrusted server): each party sends ``r_k + clip_S(Δ_k) + N(0, (zS)² I)``; the server
  sees nothing else of it, so any aggregation rule (medians included) is post-processing.

Noise is drawn from its own generator per round (and per party in local mode), seeded by the run's
seed and the round index (:func:`noise_generator`): the same seed gives the same noisy run, a resumed
run draws the noise it would have drawn, and the party sampling stream is untouched — a private run
samples the same parties as its non-private twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

PrivacyMode = Literal["central", "local"]
MODES: tuple[str, ...] = ("central", "local")

#: The streams of :func:`noise_generator` (fixed: changing them changes every private run's noise).
CENTRAL_STREAM, LOCAL_STREAM = 0x44505F43, 0x44505F4C


@dataclass(frozen=True)
class PrivacySettings:
    """Clip norm ``clip`` S (> 0; ``inf`` only without noise), noise multiplier ``noise_multiplier`` z
    (>= 0), ``delta`` δ of the reported (ε, δ) and the ``mode``, ``central`` or ``local``."""

    clip: float
    noise_multiplier: float
    delta: float
    mode: PrivacyMode = "central"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"privacy.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if math.isnan(self.clip) or self.clip <= 0:
            raise ValueError(f"privacy.clip must be > 0, got {self.clip!r}")
        if not math.isfinite(self.noise_multiplier) or self.noise_multiplier < 0:
            raise ValueError(f"privacy.noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}")
        if math.isinf(self.clip) and self.noise_multiplier > 0:
            raise ValueError(f"privacy.clip = inf with noise_multiplier {self.noise_multiplier:g}: the noise "
                             "std z·S would be infinite; give a finite clip")
        if not 0 < self.delta < 1:
            raise ValueError(f"privacy.delta must be in (0, 1), got {self.delta!r}")

    @property
    def noisy(self) -> bool:
        return self.noise_multiplier > 0


def noise_generator(seed: int, stream: int, round_index: int, party: int | None = None) -> np.random.Generator:
    """The generator of round ``round_index``'s noise (of ``party``'s message in local mode)."""
    key = [int(seed), stream, int(round_index)] + ([] if party is None else [int(party)])
    return np.random.default_rng(np.random.SeedSequence(key))


def clip_updates(models: np.ndarray, references: np.ndarray, clip: float) -> np.ndarray:
    """``r_k + clip_S(w_k − r_k)`` for every row (module docstring): rows within ``clip`` unchanged.

    Args:
        models: ``(K, d)`` the models the parties share.
        references: ``(d,)`` or ``(K, d)`` the server models they started the round from.
        clip: S, > 0 (``inf``: nothing is clipped).
    """
    out = np.array(models, dtype=np.float64)
    if math.isinf(clip):
        return out
    refs = np.broadcast_to(np.asarray(references, dtype=np.float64), out.shape)
    norms = np.linalg.norm(out - refs, axis=1)
    over = norms > clip
    if over.any():
        out[over] = refs[over] + (out[over] - refs[over]) * (clip / norms[over])[:, None]
    return out


def central_mean(received: np.ndarray, global_model: np.ndarray, settings: PrivacySettings, cohort_size: int,
                 rng: np.random.Generator) -> np.ndarray:
    """The central mechanism's noisy mean (module docstring) of the ``(K', d)`` ``received`` models, K' ≤ K.

    ``cohort_size`` K is the planned number of parties per round; ``global_model`` ``w̃`` the model
    they were sent."""
    used = received.shape[0]
    if used > cohort_size:
        raise ValueError(f"{used} replies for a planned cohort of {cohort_size} parties")
    rows = clip_updates(received, global_model, settings.clip)
    if used < cohort_size:
        rows = np.vstack([rows, np.broadcast_to(global_model, (cohort_size - used, global_model.size))])
    mean = np.full(cohort_size, 1.0 / cohort_size) @ rows  # as MeanRule computes the uniform mean
    if settings.noisy:
        mean = mean + rng.normal(0.0, settings.noise_multiplier * settings.clip / cohort_size, size=mean.shape)
    return mean


def local_message(model: np.ndarray, reference: np.ndarray, settings: PrivacySettings,
                  rng: np.random.Generator) -> np.ndarray:
    """One party's message in local mode, ``r + clip_S(w − r) + N(0, (zS)² I)`` with the noise from ``rng`` — a row
    of :func:`local_messages` when ``rng`` is that row's generator (a party on its own node may seed its own)."""
    out = clip_updates(np.asarray(model, dtype=np.float64)[None], np.asarray(reference)[None], settings.clip)[0]
    if settings.noisy:
        out += rng.normal(0.0, settings.noise_multiplier * settings.clip, size=out.shape)
    return out


def local_messages(models: np.ndarray, references: np.ndarray, parties: np.ndarray, settings: PrivacySettings,
                   seed: int, round_index: int) -> np.ndarray:
    """What each party sends in local mode: ``r_k + clip_S(w_k − r_k) + N(0, (zS)² I)``, party ``parties[i]``'s
    noise from its own generator (:func:`noise_generator`)."""
    out = clip_updates(models, references, settings.clip)
    if settings.noisy:
        std = settings.noise_multiplier * settings.clip
        for row, party in enumerate(np.asarray(parties).tolist()):
            out[row] += noise_generator(seed, LOCAL_STREAM, round_index, party).normal(0.0, std, size=out.shape[1])
    return out
