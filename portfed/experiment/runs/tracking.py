"""TensorBoard scalars of a federated run, beside its CSVs (``tracking.tensorboard`` / ``--tensorboard``).

Every round of an algorithm's sub-run writes, at step = the round (0-based), into
``<sub-run>/tensorboard/`` (``tensorboard --logdir <run dir>`` shows every algorithm side by side):

* ``reward/party_<k>`` and ``reward/mean`` — the mean training log return of the round's local steps;
* ``cash/party_<k>`` and ``cash/mean`` — the mean cash weight the policies chose in those steps;
* ``aggregation_change/party_<k>`` and ``aggregation_change/mean`` — mean ``|start − w_k|``, the jump
  across the aggregation step (paper 000 Fig. 1a);
* ``distance_to_global/party_<k>`` and ``distance_to_global/mean`` — ``‖w_k − w̃‖₂`` after the server step;
* ``quarantined`` — the number of messages the server excluded;
* ``server/iterations`` and ``server/converged`` — the aggregator's iterations and convergence (1/0).

Means are over the round's active parties (inactive ones have no reward); the per-party scalars are
those of the active parties.  A resumed run purges the events from its first round on, so the
curves have no duplicate steps.  The numbers are the round records of ``rounds.csv``: the tracking
only mirrors them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from portfed.federation import RoundRecord

TENSORBOARD_DIR = "tensorboard"
#: Round-record field → TensorBoard tag prefix.
PARTY_SCALARS: dict[str, str] = {"train_reward": "reward", "train_cash": "cash",
                                 "aggregation_change_mean": "aggregation_change",
                                 "distance_to_global": "distance_to_global"}


class RoundBoard:
    """A TensorBoard writer for one sub-run, starting at round ``first_round`` (module docstring).

    Raises:
        ImportError: TensorBoard is not installed (``pip install 'portfed[tracking]'``).
    """

    def __init__(self, out: Path, first_round: int = 0) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError("tracking.tensorboard needs TensorBoard: pip install 'portfed[tracking]'") from exc
        self.log_dir = Path(out) / TENSORBOARD_DIR
        self._writer = SummaryWriter(str(self.log_dir), purge_step=first_round if first_round else None)

    def log(self, record: RoundRecord) -> None:
        """The scalars of one round."""
        t = record.round
        active = [p for p in record.parties if p.active]
        for field, tag in PARTY_SCALARS.items():
            values = [getattr(p, field) for p in active]
            for party, value in zip(active, values, strict=True):
                if math.isfinite(value):
                    self._writer.add_scalar(f"{tag}/party_{party.party}", value, t)
            finite = [v for v in values if math.isfinite(v)]
            if finite:
                self._writer.add_scalar(f"{tag}/mean", float(np.mean(finite)), t)
        self._writer.add_scalar("quarantined", len(record.quarantined), t)
        self._writer.add_scalar("server/iterations", record.aggregator_iterations, t)
        self._writer.add_scalar("server/converged", float(record.aggregator_converged), t)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
