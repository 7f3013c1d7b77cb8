"""Order keys: two independent 64-bit hashes of an order id, computed vectorised in numpy.

A publish looks up the ledger rows of its batch's orders by these keys: binary searches in the
ledger's key index, sorted by ``k1`` (``store/key_index.py``; ``k1`` being uniform over 64 bits
also lets a merge split the key space into equal ranges), or, for a ledger without an index, a
DuckDB join on two int64 columns, ~2x cheaper than on the order_id string (10M strings decode
and hash in ~220 ms, 10M int64 pairs in ~90 ms).

The hash is defined here, not borrowed from DuckDB (whose ``hash()`` may change between
releases): the UTF-8 bytes are zero-padded to whole 64-bit little-endian words, and each key
folds the words through a splitmix64 finaliser from its own start state (an id is folded over its
own words only, so its keys do not depend on the other ids of the array). Two 64-bit keys make an
accidental match of two different orders a ~2^-128 event. They are not a cryptographic hash:
producers are trusted, as for every other field of an event (someone choosing order ids could
search for a ~2^32-work collision, and the lookup does not compare order_id strings). The work is
proportional to the ids' bytes.

Versions (``ORDER_KEYS_VERSIONS``; a ledger records the one its k1/k2 were made with in its
``lakepub.order-keys`` table property, and is looked up with it forever):

* ``splitmix64x2-v1`` (ledgers created before v2): the start states are the seeds with the byte
  length mixed in *linearly* (``seed ^ len``, ``seed + len``), so the length can cancel against
  the first data word: ``"ORD-00001"`` and ``"MRD-00001\\0\\0"``, or ``"a"`` and ``"c\\0\\0"``,
  share both keys (their second order is then taken for the first one). Kept, unchanged, for
  the ledgers that store it.
* ``splitmix64x2-v2`` (new ledgers): the length is a word of its own, folded first through the
  mix: ``k1 = mix(SEED1 ^ len)``, ``k2 = mix((SEED2 + len) * MUL2)``, then the data words as in
  v1. Every step is a bijection of the state for a given word, so two ids with the same padded
  words but different lengths (trailing NULs within the last word) always differ on both keys;
  otherwise the length meets the data only through the mix, never as a linear term a data word
  could cancel (``tests/test_keys.py`` tries NUL padding, prefixes, every length 0..40 and one
  byte changed at every position). Its start costs one more mix per id (~1 ms per 100k ids).

**Entity keys** (``entity_keys``: any contract's key, ``lakepub/contract``). A key of one string
field is hashed exactly as an order id (``order_keys`` of that column), so the orders ledgers keep
their keys. Any other key (one int, long or date field, or several fields) is first encoded to one
canonical byte string per entity, then hashed by the same function (``order_keys`` takes binary
arrays as well). The encoding concatenates, per key field in declared order, a type tag byte and
the value: ``i`` + 8 bytes big-endian two's complement for int and long (so widening int to long
keeps the keys), ``d`` + 8 bytes big-endian days since 1970-01-01 for a date, ``s`` + a 4-byte
big-endian byte length + the UTF-8 bytes for a string. Every field's extent is known from its tag
(and length), so the encoding is prefix-free field by field: two different keys of one contract
never share bytes (``("ab", "c")`` and ``("a", "bc")`` differ in their length words, ``1`` and
``"1"`` in their tags). It is built with Arrow kernels and numpy (no per-row Python): 100k keys
of (12-character string, long) encode in ~9 ms and hash in ~10 ms more (26 bytes: 4 words), vs
~6 ms for 100k 12-character order ids; a single long key ~7 ms (best of 30 on this shared 2-core
VM). ``tests/test_entity_keys.py`` pins golden values and tries keys whose naive concatenations
collide.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ORDER_KEYS_V1 = "splitmix64x2-v1"
ORDER_KEYS_V2 = "splitmix64x2-v2"
ORDER_KEYS_VERSIONS = (ORDER_KEYS_V1, ORDER_KEYS_V2)
ORDER_KEYS_VERSION = ORDER_KEYS_V2  # what a new ledger is created with

_SEED1 = np.uint64(0x9E3779B97F4A7C15)
_SEED2 = np.uint64(0xC2B2AE3D27D4EB4F)
_MUL2 = np.uint64(0xFF51AFD7ED558CCD)


def _mix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _fold(k1: np.ndarray, k2: np.ndarray, word: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    return _mix(k1 ^ word), _mix((k2 ^ word) * _MUL2 + np.uint64(w + 1))


def _start(lengths: np.ndarray, version: str) -> tuple[np.ndarray, np.ndarray]:
    """The start states of (k1, k2) for ids of these byte lengths."""
    n = lengths.astype(np.uint64)
    if version == ORDER_KEYS_V2:
        return _mix(_SEED1 ^ n), _mix((_SEED2 + n) * _MUL2)
    if version == ORDER_KEYS_V1:
        return _SEED1 ^ n, _SEED2 + n
    raise ValueError(f"unknown order keys version {version!r} (known: {', '.join(ORDER_KEYS_VERSIONS)})")


def order_keys(ids: pa.Array | pa.ChunkedArray, version: str = ORDER_KEYS_VERSION) -> tuple[np.ndarray, np.ndarray]:
    """(k1, k2) int64 arrays for a string (or binary) array without nulls, by the function
    ``version``; a string is hashed by its UTF-8 bytes, so ``s`` and ``s.encode()`` share keys."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks != 1 else ids.chunk(0)
    if ids.type == pa.large_string():
        ids = ids.cast(pa.string())
    elif ids.type == pa.large_binary():
        ids = ids.cast(pa.binary())
    n = len(ids)
    offsets = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset: ids.offset + n + 1].astype(np.int64)
    lengths = np.diff(offsets)
    words = (int(lengths.max()) + 7) // 8 if n else 0
    data = np.frombuffer(ids.buffers()[2], np.uint8)[offsets[0]: offsets[-1]] if n and ids.buffers()[2] else \
        np.zeros(0, np.uint8)
    own_words = (lengths + 7) // 8  # an id is folded over its own words only, not the array's width
    with np.errstate(over="ignore"):
        k1, k2 = _start(lengths, version)
        if n and words and (lengths == lengths[0]).all():  # fixed-width ids: one padded matrix
            padded = np.zeros((n, words * 8), np.uint8)
            padded[:, : int(lengths[0])] = data.reshape(n, int(lengths[0]))
            as_words = padded.view("<u8")
            for w in range(words):
                k1, k2 = _fold(k1, k2, as_words[:, w], w)
        elif n and words:  # word by word over the ids still that long: work follows the bytes
            source = np.concatenate([data, np.zeros(8, np.uint8)])
            starts = offsets[:-1] - offsets[0]
            by_length = np.argsort(-own_words, kind="stable")
            longer = own_words[by_length]
            lanes = np.arange(8, dtype=np.int64)
            for w in range(words):
                live = by_length[: int(np.count_nonzero(longer > w))]
                chunk = source[(starts[live] + 8 * w)[:, None] + lanes]
                chunk[lanes >= (lengths[live] - 8 * w)[:, None]] = 0
                k1[live], k2[live] = _fold(k1[live], k2[live], chunk.view("<u8").ravel(), w)
    return k1.view(np.int64), k2.view(np.int64)


# --- entity keys ------------------------------------------------------------------------------

_TAG_STRING, _TAG_INT, _TAG_DATE = b"s", b"i", b"d"


def entity_keys(table: pa.Table, key_fields: Sequence[str], version: str = ORDER_KEYS_VERSION
                ) -> tuple[np.ndarray, np.ndarray]:
    """(k1, k2) int64 arrays of the entities whose key columns ``key_fields`` are rows of
    ``table``: ``order_keys`` of the column for one string field (the orders' keys), else of the
    canonical encoding ``encode_keys``."""
    if not key_fields:
        raise ValueError("an entity key has at least one field")
    if len(key_fields) == 1 and _is_string(table.schema.field(key_fields[0]).type):
        return order_keys(table.column(key_fields[0]), version)
    return order_keys(encode_keys(table, key_fields), version)


def encode_keys(table: pa.Table, key_fields: Sequence[str]) -> pa.Array:
    """The canonical binary encoding of each row's key (module docstring), vectorised."""
    n = table.num_rows
    parts: list[pa.Array] = []
    fixed: list[np.ndarray] = []  # consecutive fixed-width fields: one (n, 9 * k) matrix

    def flush() -> None:
        if fixed:
            matrix = np.ascontiguousarray(np.hstack(fixed))
            width = matrix.shape[1]
            parts.append(pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(matrix)])
                         .cast(pa.binary()))
            fixed.clear()

    for name in key_fields:
        column = table.column(name)
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if column.null_count:
            raise ValueError(f"key field '{name}' has nulls: an entity key is never null")
        kind = column.type
        if _is_string(kind):
            data = column.cast(pa.binary())
            lengths = pc.binary_length(data).to_numpy(zero_copy_only=False).astype(">u4")
            prefix = np.empty((n, 5), np.uint8)
            prefix[:, 0] = _TAG_STRING[0]
            prefix[:, 1:] = lengths.view(np.uint8).reshape(n, 4)
            fixed.append(prefix)
            flush()
            parts.append(data)
            continue
        if pa.types.is_integer(kind):
            if pa.types.is_uint64(kind) and n and pc.max(column).as_py() >= 1 << 63:
                raise ValueError(f"key field '{name}' has values beyond the long range")
            tag, values = _TAG_INT, column.cast(pa.int64())
        elif pa.types.is_date32(kind):
            tag, values = _TAG_DATE, column.cast(pa.int32()).cast(pa.int64())
        else:
            raise ValueError(f"key field '{name}' is {kind}; a key field is a string, an integer or a date")
        cell = np.empty((n, 9), np.uint8)
        cell[:, 0] = tag[0]
        cell[:, 1:] = values.to_numpy(zero_copy_only=False).astype(">i8").view(np.uint8).reshape(n, 8)
        fixed.append(cell)
    flush()
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()))


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)
