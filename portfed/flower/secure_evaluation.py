"""The averaged evaluation under SecAgg+: only sums over parties of their scalar metrics leave them (issue 49).

Issue 49 ("Honest limits") asks for "a mode in which only party-averaged metrics leave a party".  Under
``evaluation.disclosure: averaged`` a party sends its scalar metrics rows only
(:class:`~portfed.flower.node.MetricsReply`), but on a plain deployment the server still receives each party's
rows.  With secure aggregation (``--secure``) the evaluation is one more SecAgg+ round
(:func:`portfed.flower.secure.secure_mean`, the same protocol, stages and mod as a training round): each party
encodes its rows as one vector (:func:`encode`), the server learns only the mean of the vectors, times the
parties the sum, and reads the published means and counts from it (:func:`decode`).

**The vector** (every coordinate in ``[−1, 1]``, then multiplied by SecAgg+'s clipping range ``c``).  For every
strategy ``s`` — the algorithms asked for, then the config's baselines — and every metric ``m`` of
:data:`METRICS`, with ``p = 1`` when the party's backtest of ``s`` traded and its value ``v`` is not NaN:

* ``p · clip(v / R, −1, 1)``, ``p`` and ``p · [|v| > R]`` (``R`` = :data:`VALUE_RANGE`; ±∞ is clipped);

then per strategy ``[failed]`` (the backtest could not trade) and ``[all_cash]`` (it traded with a mean
held-out cash weight ``≥ w``, the server's collapse rule's ``all_cash_weight``, sent with the request); then once
the party's held-out trading days ``d`` and ``d²`` as base-128 digits over 128 (``d < 128²``).

**What the server decodes.**  With ``n`` parties, ``Σ_k x_k = n · mean / c``.  Per strategy and metric, the
published mean is ``Σ_k p_k v_k / Σ_k p_k`` — a per-party run's mean over the parties that traded (pandas' mean
skips NaN), :func:`portfed.experiment.reports.disclosure.mean_metrics` — up to the quantisation; ``failed`` and
``all_cash`` are counts (the collapse verdicts'); ``Σ p · [|v| > R]`` is the values that were clipped, written as
``clipped_values`` and logged.  The days: when ``n Σ d² = (Σ d)²`` every party has ``Σ d / n`` days (what a plain
evaluation reports); otherwise their mean, with a warning.

**Quantisation.**  SecAgg+'s mean has an error below ``Δ = 2c / Q`` per coordinate (:mod:`portfed.flower.secure`),
so a sum of coordinates is off by less than ``n · 2 / Q`` = ``n · 1.2e-7``: a count (a sum of 0/1, or of
digits ``/ 128``: off by ``< 128 n · 1.2e-7 ≤ 0.004`` at ``n = 255``) is exact after rounding — :func:`decode`
refuses sums more than :data:`COUNT_TOLERANCE` from whole numbers — and a metric's published mean is off by
less than ``(n / Σp) · R · 2 / Q`` = ``(n / Σp) · 3.8e-6`` at ``R = 32``.

**Every party or none.**  Table 1 is over every party: an evaluation round from which a party dropped is
refused, as a plain evaluation with a missing party is.
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
            value = float(cast(float, row[name]))
            present = traded and not math.isnan(value)
            clipped = present and not abs(value) <= VALUE_RANGE
            vector += [float(np.clip(value / VALUE_RANGE, -1, 1)) if present else 0.0, float(present), float(clipped)]
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
    values = per_strategy[:, 0:3 * k:3] * VALUE_RANGE
    present = _counts(per_strategy[:, 1:3 * k:3], "the present metrics")
    clipped = _counts(per_strategy[:, 2:3 * k:3], "the clipped values")
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
        row |= {m: float(values[i, j] / present[i, j]) if present[i, j] else float("nan")
                for j, m in enumerate(METRICS)}
        rows.append(row | {CLIPPED_COLUMN: int(clipped[i].sum())})
    return SummedEvaluation(pd.DataFrame(rows), {name: int(cash[i]) for i, name in enumerate(layout.algorithms)}, days)
