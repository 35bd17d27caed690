"""A config's ``data`` section → :class:`~portfed.supervised.data.FederatedData` (seeded by ``data.seed``).

Image rows follow paper 003 §5.1 (IID split, negated parties, Laplace noise on ``noise_classes``
classes per party — MNIST-robust / MNIST-personal), FedProx (power law, ``classes_per_party``
classes), paper 002 (label shards) or paper 004 (``group_dominant``: ``n_parties / len(group_sizes)``
parties per group; ``group_sizes`` are the samples of each party of a group, before the
train/val/test cut).  The description names the set actually used and, for ``mnist_5k``, the scaling
from MNIST's 70,000 images, so every table shows the substitution.
"""

from __future__ import annotations

import numpy as np

from portfed.supervised.config import ImageData, RegressionData, SyntheticData
from portfed.supervised.data import FederatedData, split_party
from portfed.supervised.loaders import (
    LabelledPool,
    load_digits_pool,
    load_idx_pool,
    load_leaf,
    load_mnist5k_pool,
)
from portfed.supervised.partitions import (
    choose_parties,
    group_dominant,
    iid_partition,
    label_shards,
    laplace_classes,
    negate,
    power_law_partition,
)
from portfed.supervised.synthetic import fedprox_synthetic, synthetic_regression

#: The images of the full MNIST (train and test), the set the papers partitioned.
MNIST_FULL = 70_000


def _pool(section: ImageData) -> LabelledPool:
    if section.source == "mnist_5k":
        return load_mnist5k_pool(section.path)
    if section.source == "digits":
        return load_digits_pool()
    return load_idx_pool(section.path, section.idx_name, prefix=section.idx_prefix,  # type: ignore[arg-type]
                         transpose=section.idx_transpose)


def _partition(section: ImageData, pool: LabelledPool, rng: np.random.Generator) -> list[np.ndarray]:
    n = section.n_parties
    if section.partition == "power_law":
        return power_law_partition(pool.y, n, section.classes_per_party, rng)
    if section.partition == "iid":
        return iid_partition(pool.y.size, n, rng)
    if section.partition == "shards":
        return label_shards(pool.y, n, section.shards_per_party, rng)
    per_group = n // len(section.group_sizes)
    groups = np.repeat(np.arange(len(section.group_sizes)), per_group)
    sizes = [section.group_sizes[g] for g in groups]
    return group_dominant(pool.y, sizes, groups.tolist(), rng, share=section.dominant_share)


def _leaf_parties(section: ImageData) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    users = load_leaf(section.path)  # type: ignore[arg-type]
    if len(users) < section.n_parties:
        raise ValueError(f"data.n_parties={section.n_parties}, but {section.path} has only {len(users)} LEAF users")
    return [(x, y) for _, x, y in users[:section.n_parties]], f"LEAF users of {section.path}"


def build_images(section: ImageData) -> FederatedData:
    """Partition, transform (negation, Laplace noise) and split the image set of ``section``."""
    rng = np.random.default_rng(section.seed)
    if section.source == "leaf":
        raw, name = _leaf_parties(section)
    else:
        pool = _pool(section)
        raw, name = [(pool.x[i], pool.y[i]) for i in _partition(section, pool, rng)], pool.name
    n_classes = 1 + max(int(y.max()) for _, y in raw)
    negated = set(choose_parties(len(raw), section.negated_fraction, rng).tolist())
    parties = []
    for k, (x, y) in enumerate(raw):
        if k in negated:
            x = negate(x)
        if section.noise_classes and section.noise_scale > 0:
            classes = rng.choice(n_classes, size=section.noise_classes, replace=False)
            x = laplace_classes(x, y, classes, section.noise_scale, rng)
        parties.append(split_party(x, y, section.fractions, rng))
    extras = [f"{section.partition} partition"]
    if section.source == "mnist_5k":
        used = sum(y.size for _, y in raw)
        extras.insert(0, f"{used:,} of its 5,000 images used (MNIST has {MNIST_FULL:,}, "
                         f"{MNIST_FULL // 5000}× more; the config's notes give the paper's partition and its scaling)")
    if negated:
        extras.append(f"{len(negated)} negated parties")
    if section.noise_classes and section.noise_scale > 0:
        extras.append(f"Laplace({section.noise_scale:g}) noise on {section.noise_classes} classes per party")
    return FederatedData(parties=tuple(parties), task="classification", n_features=raw[0][0].shape[1],
                         n_classes=n_classes, description=f"{name}, {len(raw)} parties, " + ", ".join(extras))


def build_data(section: SyntheticData | RegressionData | ImageData) -> FederatedData:
    """The federated data of one config row."""
    if isinstance(section, SyntheticData):
        return fedprox_synthetic(section.n_parties, section.zeta, section.beta, seed=section.seed, iid=section.iid,
                                 max_samples=section.max_samples, fractions=section.fractions)
    if isinstance(section, RegressionData):
        return synthetic_regression(section.n_parties, seed=section.seed, n_features=section.n_features,
                                    samples=section.samples, outlier=section.outlier, fractions=section.fractions)[0]
    return build_images(section)
