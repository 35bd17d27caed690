"""Scalar metrics under SecAgg+: only their sums over parties leave the parties (issue 49, "Honest limits").

Issue 49 asks for "a mode in which only party-averaged metrics leave a party".  Under
``evaluation.disclosure: averaged`` a party sends its scalar metrics rows only
(:class:`~portfed.flower.node.MetricsReply`), but on a plain deployment the server still receives each party's
rows.  With secure aggregation (``--secure-aggregation``) nothing per party reaches it:

* **the evaluation** is one more SecAgg+ round (:func:`portfed.flower.secure.secure_mean`, the same protocol,
  stages and mod as a training round): each party encodes its rows as one vector (:func:`encode`), the server
  learns only the mean of the vectors, times the parties the sum, and reads the published means and counts from
  it (:func:`decode`);
* **every training round's metrics** (reward, loss, cash) ride in the masked vector after the model
  (:func:`encode_training`, :func:`decode_training`), so each contributing party's row of ``rounds.csv`` holds
  their mean over parties, as its model row holds the mean model.

**Carrying a value.**  A value ``v`` with a range ``R`` takes three coordinates — ``p · clip(v / R, −1, 1)``,
``p`` and ``p · [|v| > R]`` — where ``p = 1`` when ``v`` is present (not NaN; for the evaluation also: the
backtest traded); ±∞ is clipped.  From the sums: the mean over the parties that have the value,
``Σ p v / Σ p`` (pandas' mean skips NaN), how many had it, and how many were clipped (logged).  Every coordinate
lies in ``[−1, 1]`` and is multiplied by SecAgg+'s clipping range ``c``.

**The evaluation's vector.**  For every strategy ``s`` — the algorithms asked for, then the config's baselines —
every metric of :data:`METRICS` carried with ``R`` = :data:`VALUE_RANGE`; then per strategy ``[failed]`` (the
backtest could not trade) and ``[all_cash]`` (it traded with a mean held-out cash weight ``≥ w``, the server's
collapse rule's ``all_cash_weight``, sent with the request); then once the party's held-out trading days ``d``
and ``d²`` as base-128 digits over 128 (``d < 128²``).  The server reads per strategy and metric the mean over
the parties that traded — a per-party run's, :func:`portfed.experiment.reports.disclosure.mean_metrics` — up to
the quantisation; ``failed`` and ``all_cash`` as counts (the collapse verdicts'); the clipped values as
``clipped_values``; the days: when ``n Σ d² = (Σ d)²`` every party has ``Σ d / n`` days (what a plain evaluation
reports), otherwise their mean, with a warning.

**The training metrics' vector**: reward (a mean log return per period, ``R = 1``), loss (``R`` =
:data:`VALUE_RANGE`) and cash weight (``R = 1``), carried as above.

**Quantisation.**  SecAgg+'s mean has an error below ``Δ = 2c / Q`` per coordinate (:mod:`portfed.flower.secure`),
so a sum of coordinates is off by less than ``n · 2 / Q`` = ``n · 1.2e-7``: a count (a sum of 0/1, or of
digits ``/ 128``: off by ``< 128 n · 1.2e-7 ≤ 0.004`` at ``n = 255``) is exact after rounding — sums more
than :data:`COUNT_TOLERANCE` from whole numbers are refused — and a published mean is off by less than
``(n / Σp) · R · 2 / Q``: ``(n / Σp) · 3.8e-6`` at ``R = 32``, ``(n / Σp) · 1.2e-7`` at ``R = 1``.

**Every party or none.**  Table 1 is over every party: an evaluation round from which a party dropped is
refused, as a plain evaluation with a missing party is.  A training round goes on with the parties that
contributed (their metrics' mean), as its model does.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd
from flwr.app import ConfigRecord, RecordDict

from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.metrics import SUMMARY_METRICS
from portfed.evaluation.relative import RELATIVE_METRICS
from portfed.experiment.reports.disclosure import CLIPPED_COLUMN, SummedEvaluation
from portfed.flower.node import MetricsReply
from portfed.flower.wire.codec import WireError, scalar_str, scalar_strings

logger = logging.getLogger(__name__)

#: The metrics a party's vector carries, in ``mean_metrics.csv``'s order.
METRICS: tuple[str, ...] = (*SUMMARY_METRICS, "mean_cash", "asset_spread", *RELATIVE_METRICS)
#: ``R``: a metric (a fraction, a ratio) is carried on ``[−R, R]``; beyond it, clipped and counted.
VALUE_RANGE = 32.0
#: The base of the days' digits, and how many digits ``d`` and ``d²`` take.
DIGIT_BASE, DAY_DIGITS, SQUARE_DIGITS = 128, 2, 4
#: How far from a whole number a decoded count may be (its bound is ``≤ 0.004``, module docstring).
COUNT_TOLERANCE = 0.05
#: The training metrics a secure round's vector carries after the model, and their ranges ``R``.
TRAINING_RANGES: dict[str, float] = {"reward": 1.0, "loss": VALUE_RANGE, "cash": 1.0}
REQUEST_RECORD = "portfed_secure_evaluation"
REPLY_RECORD = "portfed_secure_evaluation_reply"
_REQUEST_FIELDS = {"algorithms", "baselines", "all_cash_weight"}


@dataclass(frozen=True)
class EvaluationLayout:
    """What the server asks of a secure evaluation: the ``algorithms`` and the ``baselines`` (the vector's
    strategies, in that order) and the collapse rule's ``all_cash_weight`` ``w``."""

    algorithms: tuple[str, ...]
    baselines: tuple[str, ...]
    all_cash_weight: float

    @property
    def strategies(self) -> tuple[str, ...]:
        return self.algorithms + self.baselines

    @property
    def size(self) -> int:
        """The vector's length: ``3`` per strategy and metric, ``2`` per strategy, the days' digits."""
        return len(self.strategies) * (3 * len(METRICS) + 2) + DAY_DIGITS + SQUARE_DIGITS

    def mark(self, content: RecordDict) -> RecordDict:
        """``content`` (an evaluate message) marked as this secure evaluation's request."""
        content[REQUEST_RECORD] = ConfigRecord({"algorithms": list(self.algorithms), "baselines": list(self.baselines),
                                                "all_cash_weight": float(self.all_cash_weight)})
        return content


def requested(content: RecordDict) -> EvaluationLayout | None:
    """The layout of a secure evaluation's request (``None``: the message is not one); :class:`WireError` for a
    malformed one."""
    record = content.config_records.get(REQUEST_RECORD)
    if record is None:
        return None
    if set(record) != _REQUEST_FIELDS:
        raise WireError(f"{REQUEST_RECORD} holds {sorted(record)}, not {sorted(_REQUEST_FIELDS)}")
    weight = record["all_cash_weight"]
    if not isinstance(weight, float) or not 0 < weight <= 1:
        raise WireError(f"all_cash_weight must be a float in (0, 1], got {weight!r}")
    return EvaluationLayout(tuple(scalar_strings(record, "algorithms")), tuple(scalar_strings(record, "baselines")),
                            weight)


def _carried(value: float, value_range: float, present: bool = True) -> list[float]:
    """``value``'s three coordinates (module docstring): ``p · clip(v / R, −1, 1)``, ``p``, ``p · [|v| > R]``."""
    present = present and not math.isnan(value)
    clipped = present and not abs(value) <= value_range
    return [float(np.clip(value / value_range, -1, 1)) if present else 0.0, float(present), float(clipped)]


def _read(sums: np.ndarray, value_range: float, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the sums of carried values (the last axis: a value's three coordinates, repeated), their means over
    the parties that had them (NaN for none), those counts and the counts of clipped values."""
    present = _counts(sums[..., 1::3], f"the present {what}")
    clipped = _counts(sums[..., 2::3], f"the clipped {what}")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(present > 0, sums[..., 0::3] * value_range / np.maximum(present, 1), np.nan)
    return means, present, clipped


def _digits(value: int, count: int) -> list[float]:
    """``value`` as ``count`` base-128 digits (least significant first), each over 128."""
    return [((value // DIGIT_BASE ** i) % DIGIT_BASE) / DIGIT_BASE for i in range(count)]


def encode(reply: MetricsReply, layout: EvaluationLayout) -> np.ndarray:
    """A party's metrics rows as the vector of the module docstring (entries in ``[−1, 1]``); ``ValueError`` when its
    rows are not the layout's strategies or its held-out days do not fit two digits."""
    agents, baselines = reply.rows()
    rows = agents + baselines
    names = tuple(str(row["strategy"]) for row in rows)
    if names != layout.strategies:
        raise ValueError(f"refused: the secure evaluation asks for {list(layout.strategies)}, this party "
                         f"backtested {list(names)}")
    if not 0 <= reply.days < DIGIT_BASE ** DAY_DIGITS:
        raise ValueError(f"refused: {reply.days} held-out days do not fit the secure evaluation's "
                         f"{DIGIT_BASE ** DAY_DIGITS - 1}")
    vector: list[float] = []
    for row in rows:
        traded = not row["failed"]
        for name in METRICS:
            vector += _carried(float(cast(float, row[name])), VALUE_RANGE, traded)
        cash = traded and float(cast(float, row["mean_cash"])) >= layout.all_cash_weight
        vector += [float(not traded), float(cash)]
    return np.asarray(vector + _digits(reply.days, DAY_DIGITS) + _digits(reply.days ** 2, SQUARE_DIGITS))


def reply_record(digest: str) -> RecordDict:
    """What a secure evaluation's reply carries beside its masked vector: the node's config digest."""
    return RecordDict({REPLY_RECORD: ConfigRecord({"digest": digest})})


def reply_digest(content: RecordDict) -> str:
    """The config digest of a secure evaluation's reply (:class:`WireError` when it has none)."""
    if REPLY_RECORD not in content.config_records:
        raise WireError(f"the secure evaluation's reply has no {REPLY_RECORD}")
    return scalar_str(content.config_records[REPLY_RECORD], "digest")


def _counts(sums: np.ndarray, what: str) -> np.ndarray:
    """``sums`` rounded to whole numbers (``ValueError`` when one is further than :data:`COUNT_TOLERANCE`)."""
    whole = np.rint(sums)
    off = np.abs(sums - whole)
    if off.size and not off.max() <= COUNT_TOLERANCE:
        raise ValueError(f"the secure sums of {what} are not whole numbers (off by {off.max():.3g}): the masked "
                         "vectors were not what the layout says")
    return whole.astype(np.int64)


def _number(digits: np.ndarray) -> int:
    return int(sum(int(d) * DIGIT_BASE ** i for i, d in enumerate(digits)))


def decode(sums: np.ndarray, parties: int, layout: EvaluationLayout, hindsight: dict[str, bool],
           benchmark: str) -> SummedEvaluation:
    """The published evaluation from ``sums`` — the sum over the ``parties`` of their vectors (entries of
    :func:`encode`'s scale) — with each strategy's ``hindsight`` flag and the ``benchmark``'s name known to the server
    from its config (module docstring)."""
    if sums.shape != (layout.size,):
        raise ValueError(f"secure evaluation sums of shape {sums.shape}, expected ({layout.size},)")
    k = len(METRICS)
    per_strategy = sums[:len(layout.strategies) * (3 * k + 2)].reshape(len(layout.strategies), 3 * k + 2)
    means, _, clipped = _read(per_strategy[:, :3 * k], VALUE_RANGE, "metrics")
    failed, cash = _counts(per_strategy[:, 3 * k], "the failed backtests"), _counts(per_strategy[:, 3 * k + 1], "all-cash")
    tail = _counts(sums[-(DAY_DIGITS + SQUARE_DIGITS):] * DIGIT_BASE, "the days' digits")
    total, squares = _number(tail[:DAY_DIGITS]), _number(tail[DAY_DIGITS:])
    days = total // parties
    if parties * squares != total ** 2:
        logger.warning("the parties' held-out periods differ in length: Table 1's note gives their mean, %.1f "
                       "trading days", total / parties)
    rows = []
    for i, name in enumerate(layout.strategies):
        if clipped[i].any():
            logger.warning("secure evaluation: %s: %s", name, ", ".join(
                f"{clipped[i, j]} value(s) of {m} outside ±{VALUE_RANGE:g}, clipped"
                for j, m in enumerate(METRICS) if clipped[i, j]))
        row: dict[str, object] = {"strategy": name, "hindsight": hindsight[name], BENCHMARK_COLUMN: benchmark,
                                  "parties": parties, "failed": int(failed[i]), "days": days}
        row |= {m: float(means[i, j]) for j, m in enumerate(METRICS)}
        rows.append(row | {CLIPPED_COLUMN: int(clipped[i].sum())})
    return SummedEvaluation(pd.DataFrame(rows), {name: int(cash[i]) for i, name in enumerate(layout.algorithms)}, days)


# ---------------------------------------------------------------------------------------- training rounds
#: The length of the training metrics' part of a secure round's vector.
TRAINING_SIZE = 3 * len(TRAINING_RANGES)


def encode_training(reward: float, loss: float, cash: float) -> np.ndarray:
    """A party's training metrics of a round as the coordinates that follow its model (module docstring)."""
    values = {"reward": reward, "loss": loss, "cash": cash}
    return np.asarray([x for name, r in TRAINING_RANGES.items() for x in _carried(float(values[name]), r)])


def decode_training(sums: np.ndarray) -> tuple[float, float, float]:
    """The mean reward, loss and cash weight over the parties that had them (NaN for none), from the sums of
    :func:`encode_training`'s coordinates; a warning names values that were clipped."""
    if sums.shape != (TRAINING_SIZE,):
        raise ValueError(f"secure training metrics' sums of shape {sums.shape}, expected ({TRAINING_SIZE},)")
    means = []
    for i, (name, r) in enumerate(TRAINING_RANGES.items()):
        mean, _, clipped = _read(sums[3 * i:3 * i + 3], r, f"{name} values")
        if clipped.sum():
            logger.warning("secure training metrics: %d %s value(s) outside ±%g, clipped", int(clipped.sum()), name, r)
        means.append(float(mean.reshape(-1)[0]))
    return means[0], means[1], means[2]
