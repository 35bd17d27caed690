"""Partitions of a labelled set into parties, and the per-party image transforms of paper 003.

* :func:`power_law_partition` — FedProx's MNIST / FEMNIST split (paper 000 §8.1): party ``u`` holds
  the ``c`` classes ``(u + j) mod C``, ``j < c``, in amounts ``⌊lognormal(mean, sigma)⌋ + minimum``.
* :func:`iid_partition` — equal IID split (paper 003 §5.1, MNIST-robust / MNIST-personal), with
  :func:`choose_parties` + :func:`negate` for the negated parties and :func:`laplace_classes` for the
  per-party Laplace noise on two classes.
* :func:`label_shards` — sort by label, cut into ``N·s`` shards, ``s`` per party (paper 002 §6).
* :func:`group_dominant` — paper 004 §7 "practical non-IID": groups of parties share two dominant
  classes that give ``share`` (80 %) of each party's data; the rest comes from the other classes.

Partitions return one index array per party into the pool; samples are never shared by two parties.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from portfed.validation import check_fraction, check_int


def _pools(y: np.ndarray, n_classes: int, rng: np.random.Generator) -> list[list[int]]:
    """Shuffled sample indices of every class (popped from the end as they are handed out)."""
    return [rng.permutation(np.flatnonzero(y == c)).tolist() for c in range(n_classes)]


def _take(pools: list[list[int]], c: int, count: int, what: str) -> list[int]:
    if count > len(pools[c]):
        raise ValueError(f"{what}: class {c} has {len(pools[c])} samples left, {count} requested; "
                         "use fewer parties or smaller sizes")
    taken = pools[c][len(pools[c]) - count:]
    del pools[c][len(pools[c]) - count:]
    return taken


def power_law_partition(y: np.ndarray, n_parties: int, classes_per_party: int, rng: np.random.Generator, *,
                        mean: float = 4.0, sigma: float = 1.0, minimum: int = 10) -> list[np.ndarray]:
    """FedProx's power-law partition (module docstring).  A class asked for more samples than it has is
    shared out proportionally (every party still gets at least one sample of each of its classes)."""
    n_classes = int(y.max()) + 1
    n_parties = check_int(n_parties, "n_parties", minimum=1)
    c = check_int(classes_per_party, "classes_per_party", minimum=1, maximum=n_classes)
    sizes = rng.lognormal(mean, sigma, n_parties).astype(np.int64) + minimum
    classes = (np.arange(n_parties)[:, None] + np.arange(c)[None, :]) % n_classes
    demand = np.zeros((n_parties, n_classes))
    np.put_along_axis(demand, classes, (sizes / c)[:, None], axis=1)
    available = np.bincount(y, minlength=n_classes)
    factor = np.minimum(1.0, available / np.maximum(demand.sum(axis=0), 1.0))
    counts = np.floor(demand * factor).astype(np.int64)
    counts[demand > 0] = np.maximum(counts[demand > 0], 1)
    pools = _pools(y, n_classes, rng)
    return [np.array(sorted(i for cls in classes[u] for i in _take(pools, int(cls), int(counts[u, cls]),
                                                                    "power_law_partition")), dtype=np.int64)
            for u in range(n_parties)]


def iid_partition(n_samples: int, n_parties: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random split of ``n_samples`` into ``n_parties`` parts of equal size (the remainder is dropped)."""
    per = check_int(n_samples, "n_samples", minimum=1) // check_int(n_parties, "n_parties", minimum=1)
    if per < 1:
        raise ValueError(f"{n_samples} samples cannot be split among {n_parties} parties")
    order = rng.permutation(n_samples)
    return [np.sort(order[k * per:(k + 1) * per]) for k in range(n_parties)]


def choose_parties(n_parties: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """``round(fraction · N)`` distinct parties, sorted (paper 003: 10 % negated for N = 10, 20 % for N = 50)."""
    count = int(round(check_fraction(fraction, "fraction") * n_parties))
    return np.sort(rng.choice(n_parties, size=count, replace=False))


def negate(x: np.ndarray) -> np.ndarray:
    """Negated images ``1 − x`` of pixels scaled to ``[0, 1]`` (paper 003 §5.1, MNIST-robust)."""
    return 1.0 - x


def laplace_classes(x: np.ndarray, y: np.ndarray, classes: Sequence[int], scale: float,
                    rng: np.random.Generator) -> np.ndarray:
    """``x`` with Laplace(0, ``scale``) noise added to the images of ``classes`` (paper 003 MNIST-personal;
    the paper gives no scale)."""
    noisy = np.array(x, dtype=np.float64)
    hit = np.isin(y, np.asarray(classes))
    noisy[hit] += rng.laplace(0.0, scale, size=noisy[hit].shape)
    return noisy


def label_shards(y: np.ndarray, n_parties: int, shards_per_party: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sort by label, cut into ``N · s`` equal shards and give each party ``s`` random shards (paper 002 §6);
    a party holds at most ``s`` classes (more only when a shard straddles a class boundary)."""
    s = check_int(shards_per_party, "shards_per_party", minimum=1)
    n_shards = check_int(n_parties, "n_parties", minimum=1) * s
    size = y.size // n_shards
    if size < 1:
        raise ValueError(f"{y.size} samples cannot make {n_shards} shards")
    order = np.argsort(y, kind="stable")
    shards = rng.permutation(n_shards).reshape(n_parties, s)
    return [np.sort(np.concatenate([order[j * size:(j + 1) * size] for j in row])) for row in shards]


def group_dominant(y: np.ndarray, sizes: Sequence[int], groups: Sequence[int], rng: np.random.Generator, *,
                   share: float = 0.8, dominant_per_group: int = 2) -> list[np.ndarray]:
    """Paper 004's practical non-IID partition: party ``k`` of group ``g = groups[k]`` draws
    ``round(share · sizes[k])`` samples evenly from the dominant classes ``{2g, 2g+1} mod C`` and the
    rest evenly from the other classes, without replacement.

    Raises:
        ValueError: when a class runs out of samples (the message names the class and the counts).
    """
    n_classes = int(y.max()) + 1
    share = check_fraction(share, "share")
    if len(sizes) != len(groups):
        raise ValueError(f"sizes and groups must have one entry per party, got {len(sizes)} and {len(groups)}")
    pools = _pools(y, n_classes, rng)
    parts = []
    for k, (size, g) in enumerate(zip(sizes, groups, strict=True)):
        size = check_int(size, f"size of party {k}", minimum=1)
        dominant = [(dominant_per_group * g + j) % n_classes for j in range(dominant_per_group)]
        others = [c for c in range(n_classes) if c not in dominant]
        n_dom = int(round(share * size))
        index: list[int] = []
        for classes, total in ((dominant, n_dom), (others, size - n_dom)):
            counts = np.full(len(classes), total // len(classes))
            counts[rng.choice(len(classes), size=total % len(classes), replace=False)] += 1
            for c, count in zip(classes, counts.tolist(), strict=True):
                index += _take(pools, c, count, f"group_dominant party {k}")
        parts.append(np.array(rng.permutation(index), dtype=np.int64))
    return parts
