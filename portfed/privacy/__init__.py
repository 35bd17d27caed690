"""Party-level differential privacy of what the parties share, with a maintained accountant (docs/privacy.md).

* :mod:`.mechanism` — the clipping of each party's update to L2 norm S, the central mechanism's noisy
  fixed-denominator mean and the local mechanism's noisy messages (McMahan et al. 2018);
* :mod:`.rounds` — :class:`PartyPrivacy`, the mechanism as the round loop takes it
  (``run_rounds(privacy=…)``), and which algorithms each mode can protect;
* :mod:`.accountant` — ε at δ after each round and the noise multiplier that meets a target ε, from
  Google's ``dp-accounting`` (RDP);
* :mod:`.report` — what the outputs say of a run's privacy: ε per round, the final ε, its description.
"""

from portfed.privacy.accountant import accountant_name, calibrate, epsilon
from portfed.privacy.mechanism import MODES, PrivacySettings, central_mean, clip_updates, local_messages
from portfed.privacy.rounds import CentralDPRule, PartyPrivacy, central_refusal, local_refusal

__all__ = [
    "MODES",
    "CentralDPRule",
    "PartyPrivacy",
    "PrivacySettings",
    "accountant_name",
    "calibrate",
    "central_mean",
    "central_refusal",
    "clip_updates",
    "epsilon",
    "local_messages",
    "local_refusal",
]
