"""The federated config's ``privacy`` section: party-level differential privacy (docs/privacy.md).

Checked at load, against the federation it belongs to (:class:`PrivacyModel`): the listed algorithms
must be ones the mode protects (central DP refuses medians, geometric medians and every rule that is
not a function of the mean, naming why), δ must be below ``1/N``, and a ``target_epsilon`` is turned
into the noise multiplier that meets it over the run's rounds and sampling, or refused as out of reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, model_validator

from portfed.experiment.config.algorithms import portfolio_algorithm
from portfed.experiment.config.base import StrictModel
from portfed.privacy.mechanism import PrivacyMode, PrivacySettings


class _Federation(Protocol):
    """What the privacy checks read of the config's ``federation`` section."""

    parties_per_round: int | None
    rounds: int
    algorithms: list[str]
    algorithm_params: Mapping[str, Mapping[str, Any]]
    screen_factor: float | None
    optimizer_state: str


class _Parties(Protocol):
    """What the privacy checks read of the config's ``parties`` section."""

    count: int


class PrivacySection(StrictModel):
    """Party-level DP of what the parties share (McMahan et al. 2018; :mod:`portfed.privacy`).

    ``clip``: S, the L2 norm each party's update ``w_k − w̃`` is clipped to (``.inf`` only with
    ``noise_multiplier: 0``).  Exactly one of ``noise_multiplier`` (z: noise std ``zS/K`` on the mean in
    ``central`` mode, ``zS`` on each message in ``local`` mode) and ``target_epsilon`` (z is calibrated
    so that the accountant's ε after the run's rounds is at most this).  ``delta``: δ of the reported
    (ε, δ), below ``1/parties.count``.  ``mode``: ``central`` (trusted server: mean-based rules only) or
    ``local`` (each party noises what it sends; every rule).
    """

    clip: float = Field(gt=0)
    noise_multiplier: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    target_epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float = Field(default=1e-5, gt=0, lt=1)
    mode: PrivacyMode = "central"

    @model_validator(mode="after")
    def _one_noise_setting(self) -> PrivacySection:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("privacy needs exactly one of noise_multiplier and target_epsilon")
        if self.target_epsilon is not None and self.clip == float("inf"):
            raise ValueError("privacy.clip = inf with target_epsilon: the noise std z·S would be infinite")
        return self

    def settings(self, rounds: int, sampling: float) -> PrivacySettings:
        """The mechanism's settings, z calibrated from ``target_epsilon`` (:func:`portfed.privacy.calibrate`) for
        ``rounds`` rounds at ``sampling`` = K/N in central mode; in local mode the untrusted server's sampling
        amplifies nothing, so for a party that takes part in every round."""
        from portfed.privacy.accountant import calibrate

        z = self.noise_multiplier
        if z is None:
            z = calibrate(float(self.target_epsilon), sampling if self.mode == "central" else 1.0, rounds, self.delta)
        return PrivacySettings(clip=self.clip, noise_multiplier=z, delta=self.delta, mode=self.mode)


class PrivacyModel(StrictModel):
    """The ``privacy`` key of :class:`~portfed.experiment.config.FederatedConfig` and its checks (module doc)."""

    privacy: PrivacySection | None = None

    if TYPE_CHECKING:
        federation: _Federation
        parties: _Parties

    def sampling(self) -> float:
        """``q = K/N``: the share of parties each round samples."""
        per_round = self.federation.parties_per_round
        return 1.0 if per_round is None else per_round / self.parties.count

    def privacy_settings(self) -> PrivacySettings | None:
        """The mechanism's settings (z resolved), or ``None`` without a ``privacy`` section."""
        return None if self.privacy is None else self.privacy.settings(self.federation.rounds, self.sampling())

    @model_validator(mode="after")
    def _privacy_fits(self) -> PrivacyModel:
        if self.privacy is None:
            return self
        from portfed.privacy.rounds import PartyPrivacy

        if self.privacy.delta >= 1.0 / self.parties.count:
            raise ValueError(f"privacy.delta = {self.privacy.delta:g} must be below 1/parties.count = "
                             f"{1.0 / self.parties.count:g} (else releasing one party's update in full would meet it)")
        mechanism = PartyPrivacy(self.privacy_settings())  # type: ignore[arg-type]
        for name in self.federation.algorithms:
            mechanism.check(portfolio_algorithm(name, self.federation.algorithm_params.get(name, {})),
                            screened=self.federation.screen_factor is not None,
                            shared_optimizer=self.federation.optimizer_state == "average")
        return self
