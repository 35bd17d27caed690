"""The registry: every algorithm's name and the factory that makes it from its knobs."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from portfed.federation.algorithms import (
    adaptive,
    amp,
    apfl,
    ditto,
    fedplus,
    finetune,
    mgda,
    perfedavg,
    pfedme,
    scaffold,
)
from portfed.federation.algorithms.base import Algorithm, Factory

#: Name → factory, in the order the tables list them.
ALGORITHMS: Mapping[str, Factory] = MappingProxyType({
    **fedplus.FACTORIES,
    **mgda.FACTORIES,
    **amp.FACTORIES,
    **scaffold.FACTORIES,
    **ditto.FACTORIES,
    **pfedme.FACTORIES,
    **perfedavg.FACTORIES,
    **apfl.FACTORIES,
    **finetune.FACTORIES,
    **adaptive.FACTORIES,
})


def make_algorithm(name: str, **knobs: object) -> Algorithm:
    """The registered algorithm ``name`` with some knobs overridden, e.g. ``make_algorithm("fedavg+",
    lam=0.001, sigma=Schedule(0.01, 0.5, 100), rho=1.0)``.

    Schedule knobs (``lam``, ``lam_t``, ``sigma``, ``global_lr``, ``fedamp_alpha``) take a number, a
    :class:`~portfed.federation.schedule.Schedule` or a mapping ``{initial, decay, every}``; ``rho``
    replaces the threshold of the algorithm's single-kind penalty; ``hybrid+`` requires
    ``penalty=LayerwisePenalty(...)``; ``solver`` (Fed+ variants) is ``"fast"`` or ``"eq34"``
    (:func:`~portfed.federation.aggregate.smoothed_aggregate`).  Each family's module lists its knobs.

    Raises:
        ValueError: unknown name, a knob the algorithm does not take, or a bad value (one line).
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid algorithms: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name](**knobs)
