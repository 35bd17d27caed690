"""Deterministic crash points, for kill-and-resume tests of the runner.

With ``PORTFED_CRASH_AT=<point>:<n>`` in the environment the process kills itself with SIGKILL —
no clean-up, no ``finally``, as a power cut or the OOM killer would — the ``n``-th time (1-based) it
reaches :func:`crash_point` ``<point>``.  Points: ``local_train`` (inside a round's local training),
``checkpoint_write`` (a checkpoint written to its temporary file, not yet renamed over the old one),
``evaluation`` (after the rounds, during the held-out backtests).  Without the variable a crash
point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "PORTFED_CRASH_AT"
POINTS: tuple[str, ...] = ("local_train", "checkpoint_write", "evaluation")
_reached: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process if ``$PORTFED_CRASH_AT`` is ``name:n`` and this is the n-th call for ``name``."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, count = spec.partition(":")
    if point not in POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV} must be '<point>:<n>' with a point of {POINTS} and n >= 1, got {spec!r}")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == int(count):
        os.kill(os.getpid(), signal.SIGKILL)
