"""The vocabulary every message of :mod:`portfed.flower.wire` is read with: one :class:`WireError` naming the
field, and readers that check each field's kind (an integer is an ``int``, a name a ``str``, a vector
one-dimensional and numeric)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from portfed.validation import check_int

#: The message types (the ``message_type`` of a Flower message; the ClientApp routes on it).
QUERY, TRAIN, EVALUATE = "query", "train", "evaluate"


class WireError(ValueError):
    """A message that does not hold what its type promises (names the missing or bad field)."""


@contextmanager
def reading(what: str) -> Iterator[None]:
    """Any ``KeyError``, ``TypeError``, ``ValueError`` or ``IndexError`` while decoding ``what`` as a
    :class:`WireError` naming it (a missing key, a value of the wrong kind)."""
    try:
        yield
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise WireError(f"{what} is malformed: {type(error).__name__}: {error}") from error


def scalar_int(record: ConfigRecord, name: str, minimum: int | None = None) -> int:
    if name not in record:
        raise WireError(f"the message has no scalar {name!r}")
    return check_int(record[name], name, minimum=minimum, error=WireError)


def scalar_str(record: ConfigRecord, name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        raise WireError(f"{name} must be a string, got {value!r}")
    return value


def scalar_strings(record: ConfigRecord, name: str) -> list[str]:
    value = record.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WireError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


def vector(array: Array, name: str) -> np.ndarray:
    value = array.numpy()
    if value.ndim != 1 or not np.issubdtype(value.dtype, np.number):
        raise WireError(f"{name} must be a one-dimensional numeric array, got {value.dtype} of shape {value.shape}")
    return value


def array_record(values: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in values.items()})


def array(content: RecordDict, record: str, name: str) -> np.ndarray:
    try:
        return content.array_records[record][name].numpy()
    except KeyError as error:
        raise WireError(f"the message has no array {record}/{name}") from error


def config_record(content: RecordDict, record: str) -> ConfigRecord:
    if record not in content.config_records:
        raise WireError(f"the message has no config record {record!r}")
    return content.config_records[record]
