"""The algorithm a portfolio config names: :func:`portfolio_algorithm`, shared by the federation section's and
the privacy section's checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portfed.federation.algorithms import Algorithm


def portfolio_algorithm(name: str, params: Mapping[str, Any]) -> Algorithm:
    """``make_algorithm(name, **params)`` for portfolio parties, whose trainers run no local rule (one line if it needs one)."""
    from portfed.federation.algorithms import make_algorithm, require_rules

    return require_rules(make_algorithm(name, **params), frozenset(), "the portfolio agents' DPG trainers (the "
                         "personalised baselines that run on portfolio parties are ditto, fedavg-ft and fedprox-ft)")
