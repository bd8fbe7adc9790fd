"""The learner's on-disk checkpoint format: versioned JSON, checked field by field.

A checkpoint is one JSON document (orjson) with a format tag and a version:

    {"format": "mallory-learner", "version": 1, "store": {...}, "reward": {...},
     "policy": {...}, "pending": ...}

No pickle: a checkpoint comes from a campaign directory that may have been copied around,
and loading it must never run code. Numpy arrays travel as base64 of their little-endian
bytes next to their shape; the `random.Random` state travels as its integer tuple.
Everything read back is validated here, so a corrupt or foreign file gives a
`MalloryError` naming the field instead of a KeyError deep inside the learner.

Actions are opaque labels to the learner, but a checkpoint must write them down: they may
be str, int, float, bool, None, or tuples of those (tuples are written as JSON lists and
read back as tuples, so they stay hashable).
"""

from __future__ import annotations

import base64
import binascii
import random
from collections.abc import Hashable
from typing import Any

import numpy as np
import orjson

from mallory.errors import MalloryError

FORMAT = "mallory-learner"
VERSION = 1


class CheckpointError(MalloryError):
    """A checkpoint that is not a valid Mallory learner checkpoint."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"bad learner checkpoint: {reason}")


def dumps(document: dict[str, Any]) -> bytes:
    return orjson.dumps({"format": FORMAT, "version": VERSION, **document})


def loads(data: bytes) -> dict[str, Any]:
    """Parse and check the envelope; the caller checks the body with `field`."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"not a {FORMAT!r} document")
    if document.get("version") != VERSION:
        raise CheckpointError(f"unsupported version {document.get('version')!r} (this Mallory reads {VERSION})")
    return document


def field(document: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`document[key]`, which must exist and be of `kind` (bool is never an int here)."""
    if not isinstance(document, dict):
        raise CheckpointError(f"{where} is not an object")
    if key not in document:
        raise CheckpointError(f"{where}.{key} is missing")
    value = document[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise CheckpointError(f"{where}.{key} has type bool, expected {_names(kinds)}")
    if not isinstance(value, kinds):
        raise CheckpointError(f"{where}.{key} has type {type(value).__name__}, expected {_names(kinds)}")
    return value


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


def encode_array(array: np.ndarray) -> dict[str, Any]:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "b64": base64.b64encode(np.ascontiguousarray(little).tobytes()).decode("ascii"),
    }


def decode_array(document: Any, where: str, dtype: str, ndim: int) -> np.ndarray:
    if field(document, "dtype", str, where) != dtype:
        raise CheckpointError(f"{where}.dtype is {document['dtype']!r}, expected {dtype!r}")
    shape = field(document, "shape", list, where)
    if len(shape) != ndim or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise CheckpointError(f"{where}.shape {shape!r} is not a {ndim}-d shape")
    try:
        raw = base64.b64decode(field(document, "b64", str, where), validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError(f"{where}.b64 is not base64") from None
    little = np.dtype(dtype).newbyteorder("<")
    if len(raw) != little.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise CheckpointError(f"{where}: {len(raw)} bytes do not fill shape {shape}")
    return np.frombuffer(raw, dtype=little).astype(np.dtype(dtype)).reshape(shape)


def encode_rng(rng: random.Random) -> list[Any]:
    version, internal, gauss_next = rng.getstate()
    return [version, list(internal), gauss_next]


def decode_rng(document: Any, where: str) -> random.Random:
    rng = random.Random()
    try:
        version, internal, gauss_next = document
        rng.setstate((version, tuple(internal), gauss_next))
    except (TypeError, ValueError):
        raise CheckpointError(f"{where} is not a random.Random state") from None
    return rng


def encode_action(action: Hashable) -> Any:
    if action is None or isinstance(action, (str, int, float, bool)):
        return action
    if isinstance(action, tuple):
        return [encode_action(part) for part in action]
    raise MalloryError(
        f"action {action!r} of type {type(action).__name__} cannot be checkpointed: "
        "use str, int, float, bool, None or tuples of those as action labels"
    )


def decode_action(value: Any, where: str) -> Hashable:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list):
        return tuple(decode_action(part, where) for part in value)
    raise CheckpointError(f"{where}: {value!r} is not an action label")
