"""Private data augmenters (paper 001 §9.3; DESIGN.md §4) and their stylized-fact evaluation.

Every generator follows scikit-learn's estimator conventions (:class:`Estimator`: parameters validated
by ``fit``, ``get_params`` / ``set_params``, fitted attributes ending with ``_``) and has the same API:
``fit(train: PricePanel) -> self`` and ``sample(n_days, rng) -> PricePanel`` (synthetic closes
continuing the last real close; see :mod:`portfed.generators.base`).  :func:`make_generator` builds
one by registry name; ``Augmenter(generator, synthetic_days=…, regenerate_every=…, seed=…).fit(train)``
serves a party's augmented training panel.
"""

from __future__ import annotations

from portfed.generators.augment import Augmenter
from portfed.generators.base import (
    Estimator,
    Generator,
    GeneratorError,
    InvalidParameterError,
    NotFittedError,
    clone,
)
from portfed.generators.bootstrap import StationaryBootstrapGenerator
from portfed.generators.gan import GANGenerator
from portfed.generators.garch import GARCHGenerator
from portfed.generators.gbm import GBMGenerator
from portfed.generators.markov import VariableOrderMarkov
from portfed.generators.registry import GENERATORS, make_generator
from portfed.generators.stylized import StylizedFacts, stylized_facts
from portfed.generators.vom import VOMGenerator

__all__ = [
    "GENERATORS",
    "Augmenter",
    "GANGenerator",
    "GARCHGenerator",
    "GBMGenerator",
    "Generator",
    "Estimator",
    "GeneratorError",
    "InvalidParameterError",
    "NotFittedError",
    "StationaryBootstrapGenerator",
    "StylizedFacts",
    "VOMGenerator",
    "VariableOrderMarkov",
    "clone",
    "make_generator",
    "stylized_facts",
]
