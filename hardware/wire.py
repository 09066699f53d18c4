"""msgpack messages with numpy arrays, no pickle: the wire format of the MuJoCo-backed robot server.

An array travels as a map ``{"__ndarray__": True, "dtype": "<f8", "shape": [3], "data": <raw bytes>}``
(the layout of openpi's ``msgpack_numpy``); numpy scalars travel as plain numbers. Decoding accepts only
bool, integer and float dtypes with a shape whose size matches the bytes, so a peer can never make this
side build an object array or run code. Anything else in a message is plain msgpack (maps with string
keys, lists, str, bytes, numbers, bool, nil).
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from robot_rl.transport import ProtocolError

ARRAY_TAG = "__ndarray__"
ARRAY_KEYS = frozenset({ARRAY_TAG, "dtype", "shape", "data"})
ARRAY_KINDS = "biuf"
"""numpy dtype kinds an array may have: bool, signed and unsigned integer, float."""
MAX_NDIM = 8


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in ARRAY_KINDS:
            raise TypeError(f"cannot send a {obj.dtype} array (only bool, int and float arrays)")
        # tobytes() is C order whatever the layout (np.ascontiguousarray would make a 0-d array 1-d)
        return {ARRAY_TAG: True, "dtype": obj.dtype.str, "shape": list(obj.shape), "data": obj.tobytes()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot send a {type(obj).__name__}")


def _decode(obj: dict[str, Any]) -> Any:
    if ARRAY_TAG not in obj:
        return obj
    if set(obj) != ARRAY_KEYS or obj[ARRAY_TAG] is not True:
        raise ProtocolError(f"an array must have exactly the keys {sorted(ARRAY_KEYS)}, got {sorted(obj)}")
    dtype, shape, data = obj["dtype"], obj["shape"], obj["data"]
    try:
        dt = np.dtype(dtype) if isinstance(dtype, str) and len(dtype) <= 8 else None
    except TypeError:
        dt = None
    if dt is None or dt.kind not in ARRAY_KINDS:
        raise ProtocolError(f"array dtype {dtype!r:.40} is not a bool, integer or float dtype")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ProtocolError(f"array shape {shape!r:.60} must be a list of at most {MAX_NDIM} sizes >= 0")
    if not isinstance(data, bytes) or len(data) != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
        size = len(data) if isinstance(data, bytes) else type(data).__name__
        raise ProtocolError(f"array data ({size} bytes) does not match dtype {dtype} and shape {shape}")
    return np.frombuffer(data, dtype=dt).reshape(shape).copy()


def pack(message: dict[str, Any]) -> bytes:
    """msgpack bytes of ``message`` (numpy arrays and scalars included).

    Raises:
        TypeError: a value msgpack cannot carry (an object array, an arbitrary Python object).
    """
    return msgpack.packb(message, default=_encode, use_bin_type=True)


def unpack(frame: bytes) -> dict[str, Any]:
    """The message (a map with string keys) in ``frame``, arrays decoded as writable numpy arrays.

    Raises:
        ProtocolError: not msgpack, trailing bytes, not a map, a non-string map key, an extension type,
            or a malformed array (module doc).
    """
    try:
        message = msgpack.unpackb(
            bytes(frame), object_hook=_decode, raw=False, strict_map_key=True, ext_hook=_no_ext
        )
    except ProtocolError:
        raise
    except Exception as err:  # msgpack raises several types (ExtraData, FormatError, StackError, ValueError)
        raise ProtocolError(f"message is not msgpack: {type(err).__name__}: {err}") from err
    if not isinstance(message, dict):
        raise ProtocolError(f"message must be a msgpack map, got {type(message).__name__}")
    return message


def _no_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"msgpack extension type {code} is not accepted")
