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
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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
    """(k1, k2) int64 arrays for a string array without nulls, by the function ``version``."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks != 1 else ids.chunk(0)
    if ids.type == pa.large_string():
        ids = ids.cast(pa.string())
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


def entity_keys(table: pa.Table, key_fields, version: str = ORDER_KEYS_VERSION) -> tuple[np.ndarray, np.ndarray]:
    """(k1, k2) of the entities in ``table`` (their key columns ``key_fields``): a single string
    key is hashed as an order id."""
    if len(key_fields) != 1 or not pa.types.is_string(table.column(key_fields[0]).type):
        raise NotImplementedError("composite and non-string entity keys")
    return order_keys(table.column(key_fields[0]), version)
