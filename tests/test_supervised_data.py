"""Generators, partitions and loaders of the supervised benchmarks (portfed.supervised)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from portfed.supervised.build import build_data
from portfed.supervised.config import ImageData
from portfed.supervised.data import split_party
from portfed.supervised.loaders import (
    MNIST5K_CLASS_COUNTS,
    load_digits_pool,
    load_idx_pool,
    load_leaf,
    load_mnist5k_pool,
    read_idx,
)
from portfed.supervised.partitions import (
    choose_parties,
    group_dominant,
    iid_partition,
    label_shards,
    laplace_classes,
    power_law_partition,
)
from portfed.supervised.synthetic import fedprox_synthetic, power_law_sizes, synthetic_regression


def _label_tv(data) -> float:
    """Mean total-variation distance between each party's label histogram and the pooled one."""
    hist = np.array([np.bincount(p.y_train, minlength=10) / p.n_train for p in data.parties])
    pooled = hist.mean(axis=0)
    return float(0.5 * np.abs(hist - pooled).sum(axis=1).mean())


def test_sample_counts_follow_fedprox_lognormal_law() -> None:
    sizes = power_law_sizes(20000, np.random.default_rng(0))
    extra = sizes - 50
    assert sizes.min() >= 50
    assert np.median(extra) == pytest.approx(np.exp(4.0), rel=0.05)  # median of lognormal(4, 2)
    assert np.mean(extra > np.exp(6.0)) == pytest.approx(0.1587, abs=0.01)  # P(Z > 1)


def test_synthetic_is_seeded_and_non_iid_parties_have_skewed_labels() -> None:
    a = fedprox_synthetic(20, 1.0, 1.0, seed=3)
    b = fedprox_synthetic(20, 1.0, 1.0, seed=3)
    np.testing.assert_array_equal(a.parties[5].x_train, b.parties[5].x_train)
    iid = fedprox_synthetic(20, 0.0, 0.0, seed=3, iid=True)
    assert a.n_features == 60 and a.n_classes == 10 and a.n_parties == 20
    assert _label_tv(a) > 0.4 > 0.25 > _label_tv(iid)
    sizes = [p.n_train + p.x_val.shape[0] + p.x_test.shape[0] for p in a.parties]
    assert min(sizes) >= 50


def test_regression_outlier_party_and_noise_level() -> None:
    data, truth = synthetic_regression(6, seed=1, n_features=20, samples=4000, outlier=2)
    others = np.delete(truth.weights, 2, axis=0)
    spread = np.linalg.norm(others - others.mean(axis=0), axis=1).max()
    assert np.linalg.norm(truth.weights[2] - others.mean(axis=0)) > 2 * spread
    party = data.parties[0]
    residual = party.y_train - party.x_train @ truth.weights[0]
    assert residual.var() == pytest.approx(2.0, rel=0.1)
    assert party.x_test.shape[0] == 2000  # paper 003: 50/50 train/test


def test_power_law_partition_gives_c_consecutive_classes_disjointly() -> None:
    y = np.repeat(np.arange(10), 100)
    parts = power_law_partition(y, 25, 2, np.random.default_rng(0))
    flat = np.concatenate(parts)
    assert flat.size == np.unique(flat).size
    for u, index in enumerate(parts):
        assert set(y[index].tolist()) == {u % 10, (u + 1) % 10}
    sizes = np.array([p.size for p in parts])
    assert sizes.max() > 3 * np.median(sizes)  # heavy tail


def test_iid_partition_negated_fraction_and_laplace_classes() -> None:
    parts = iid_partition(1000, 7, np.random.default_rng(0))
    assert [p.size for p in parts] == [142] * 7
    assert choose_parties(50, 0.2, np.random.default_rng(1)).size == 10
    section = ImageData(kind="images", partition="iid", n_parties=10, negated_fraction=0.1)
    data = build_data(section)
    bright = [k for k, p in enumerate(data.parties) if p.x_train.mean() > 0.5]
    assert len(bright) == 1 and "1 negated parties" in data.description
    pool = load_mnist5k_pool()
    original = 1.0 - data.parties[bright[0]].x_train[0]
    assert np.any(np.all(np.abs(pool.x - original) < 1e-12, axis=1))  # a negated digit: 1 − x of a pool image
    x = np.zeros((6, 3))
    y = np.array([0, 1, 2, 0, 1, 2])
    noisy = laplace_classes(x, y, [1, 2], 0.5, np.random.default_rng(0))
    assert np.all(noisy[y == 0] == 0) and np.all(noisy[y != 0] != 0)
    assert pool.x.shape == (5000, 784)


def test_label_shards_limit_classes_per_party() -> None:
    y = np.repeat(np.arange(10), 20)
    parts = label_shards(y, 10, 2, np.random.default_rng(0))
    assert all(len(set(y[p].tolist())) <= 2 for p in parts)
    assert np.unique(np.concatenate(parts)).size == 200


def test_group_dominant_share_is_eighty_percent() -> None:
    pool = load_digits_pool()
    groups = np.repeat(np.arange(5), 4)
    sizes = [80, 70, 60, 50, 40]
    parts = group_dominant(pool.y, [sizes[g] for g in groups], groups.tolist(), np.random.default_rng(0))
    for index, g in zip(parts, groups, strict=True):
        labels = pool.y[index]
        assert labels.size == sizes[g]
        assert np.mean(np.isin(labels, [2 * g, 2 * g + 1])) == pytest.approx(0.8, abs=0.01)
    with pytest.raises(ValueError, match="class 0 has"):
        group_dominant(pool.y, [5000], [0], np.random.default_rng(0))


def test_split_party_fractions_and_errors() -> None:
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    party = split_party(x, y, (0.6, 0.2, 0.2), np.random.default_rng(0))
    assert (party.n_train, party.x_val.shape[0], party.x_test.shape[0]) == (6, 2, 2)
    assert sorted(np.concatenate([party.y_train, party.y_val, party.y_test]).tolist()) == list(range(10))
    with pytest.raises(ValueError, match="summing to 1"):
        split_party(x, y, (0.5, 0.2, 0.2), np.random.default_rng(0))


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def test_idx_loader_reads_torchvision_layout_plain_and_gzip(tmp_path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 3, 4))
    labels = np.array([1, 2, 3, 4, 5])
    raw = tmp_path / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "emnist-letters-train-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(images)))
    (raw / "emnist-letters-train-labels-idx1-ubyte").write_bytes(_idx_bytes(labels))
    np.testing.assert_array_equal(read_idx(raw / "emnist-letters-train-labels-idx1-ubyte"), labels)
    pool = load_idx_pool(tmp_path, "EMNIST", prefix="emnist-letters-", transpose=True)
    assert pool.x.shape == (5, 12)
    np.testing.assert_allclose(pool.x[1], images[1].T.reshape(-1) / 255.0)
    np.testing.assert_array_equal(pool.y, labels - 1)
    (raw / "bad").write_bytes(b"\x01\x02\x08\x01")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(raw / "bad")
    (raw / "short").write_bytes(_idx_bytes(labels)[:-1])
    with pytest.raises(ValueError, match="bytes"):
        read_idx(raw / "short")
    with pytest.raises(FileNotFoundError):
        load_idx_pool(tmp_path, "MNIST")


def test_leaf_loader_reads_users_across_files(tmp_path) -> None:
    def write(name: str, users: dict[str, int]) -> None:
        content = {"users": list(users), "num_samples": list(users.values()),
                   "user_data": {u: {"x": np.ones((n, 4)).tolist(), "y": list(range(n))} for u, n in users.items()}}
        (tmp_path / name).write_text(json.dumps(content))

    write("a.json", {"f_2": 3, "f_0": 2})
    write("b.json", {"f_1": 4})
    users = load_leaf(tmp_path)
    assert [u for u, _, _ in users] == ["f_0", "f_1", "f_2"]
    assert users[1][1].shape == (4, 4) and users[1][2].tolist() == [0, 1, 2, 3]
    (tmp_path / "c.json").write_text(json.dumps({"users": ["x"], "num_samples": [5],
                                                 "user_data": {"x": {"x": [[1.0]], "y": [0]}}}))
    with pytest.raises(ValueError, match="declares 5 samples"):
        load_leaf(tmp_path)


def test_mnist5k_has_5000_real_mnist_images_with_500_per_class() -> None:
    pool = load_mnist5k_pool()
    assert pool.x.shape == (5000, 784) and pool.x.dtype == np.float64
    assert tuple(np.bincount(pool.y).tolist()) == MNIST5K_CLASS_COUNTS
    assert pool.x.min() == 0.0 and pool.x.max() == 1.0
    assert 0.10 < pool.x.mean() < 0.16  # MNIST's mean intensity is about 0.13
    assert not pool.x.flags.writeable  # one cached copy per process, shared read-only


def test_image_rows_default_to_mnist5k_and_print_the_scaling() -> None:
    data = build_data(ImageData(kind="images", partition="iid", n_parties=10, fractions=(0.4, 0.1, 0.5)))
    assert data.n_features == 784 and sum(p.n_train for p in data.parties) == 10 * 200
    assert "MNIST 5k" in data.description and "MNIST has 70,000, 14× more" in data.description
    digits = build_data(ImageData(kind="images", source="digits", partition="iid", n_parties=10))
    assert digits.n_features == 64 and "scikit-learn digits" in digits.description


def test_mnist5k_reader_refuses_a_file_of_another_shape(tmp_path) -> None:
    bad = tmp_path / "mnist_5k.csv.gz"
    with gzip.open(bad, "wt") as handle:
        handle.write("0,1,2\n3,4,5\n")
    with pytest.raises(ValueError, match="785"):
        load_mnist5k_pool(bad)
