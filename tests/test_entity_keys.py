"""Entity keys (lakepub.keys.entity_keys): a single string key is the order key, any other key is
a canonical, unambiguous encoding hashed the same way; golden values pin both."""

from __future__ import annotations

import itertools
from datetime import date

import numpy as np
import pyarrow as pa
import pytest

from lakepub.keys import ORDER_KEYS_V1, encode_keys, entity_keys, order_keys

_M = (1 << 64) - 1


def _reference_v2(data: bytes) -> tuple[int, int]:
    """splitmix64x2-v2 of a byte string in plain Python (lakepub/keys.py's docstring)."""
    def mix(x: int) -> int:
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
        return x ^ (x >> 31)

    n = len(data)
    k1 = mix(0x9E3779B97F4A7C15 ^ n)
    k2 = mix(((0xC2B2AE3D27D4EB4F + n) * 0xFF51AFD7ED558CCD) & _M)
    for w in range((n + 7) // 8):
        word = int.from_bytes(data[8 * w: 8 * w + 8].ljust(8, b"\0"), "little")
        k1 = mix(k1 ^ word)
        k2 = mix((((k2 ^ word) * 0xFF51AFD7ED558CCD) + w + 1) & _M)
    signed = lambda x: x - (1 << 64) if x >> 63 else x  # noqa: E731
    return signed(k1), signed(k2)


def _reference_encoding(row: tuple) -> bytes:
    """The canonical encoding of one key, as the docstring states it."""
    out = b""
    for value in row:
        if isinstance(value, str):
            data = value.encode()
            out += b"s" + len(data).to_bytes(4, "big") + data
        elif isinstance(value, date):
            out += b"d" + (value - date(1970, 1, 1)).days.to_bytes(8, "big", signed=True)
        else:
            out += b"i" + value.to_bytes(8, "big", signed=True)
    return out


COMPOSITE = pa.table({
    "shop": pa.array(["", "a", "ab", "é"]),
    "item": pa.array([0, -1, 2**62, 7], pa.int64()),
    "since": pa.array([date(1970, 1, 1), date(2025, 3, 4), date(1, 1, 1), date(9998, 12, 31)]),
})


def test_composite_keys_never_change():
    """A ledger stores these keys: a change of the encoding or the hash would make lookups miss rows."""
    k1, k2 = entity_keys(COMPOSITE, ["shop", "item", "since"])
    assert list(map(int, k1)) == [-3827862417905152280, -1676567816697814264, -4531460320597526569,
                                  -77705172767132022]
    assert list(map(int, k2)) == [-452064548191490101, -3231442860608898058, -943499790453914902,
                                  -6607607660483570927]
    rows = list(zip(*(COMPOSITE.column(n).to_pylist() for n in ("shop", "item", "since"))))
    assert encode_keys(COMPOSITE, ["shop", "item", "since"]).to_pylist() == [_reference_encoding(r) for r in rows]
    assert [_reference_v2(_reference_encoding(r)) for r in rows] == list(zip(map(int, k1), map(int, k2)))


def test_a_single_string_key_is_the_order_key():
    ids = pa.array(["", "a", "a\x00", "o000000000001", "é" * 9])
    table = pa.table({"order_id": ids})
    for version in (None, ORDER_KEYS_V1):
        args = () if version is None else (version,)
        got, want = entity_keys(table, ["order_id"], *args), order_keys(ids, *args)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    chunked = pa.table({"order_id": pa.chunked_array([ids.slice(0, 2), ids.slice(2)])})
    assert entity_keys(chunked, ["order_id"])[0].tolist() == order_keys(ids)[0].tolist()


def test_single_int_and_date_keys_are_encoded_and_int_widening_keeps_keys():
    ints = pa.table({"id": pa.array([1, -1, 0, 2**31 - 1], pa.int32())})
    longs = pa.table({"id": pa.array([1, -1, 0, 2**31 - 1], pa.int64())})
    assert entity_keys(ints, ["id"])[0].tolist() == entity_keys(longs, ["id"])[0].tolist()
    assert entity_keys(longs, ["id"])[0].tolist() == [_reference_v2(_reference_encoding((v,)))[0]
                                                      for v in longs.column("id").to_pylist()]
    days = pa.table({"d": pa.array([date(2024, 2, 29)])})
    assert entity_keys(days, ["d"])[1].tolist() == [_reference_v2(_reference_encoding((date(2024, 2, 29),)))[1]]


def _keys(columns: dict[str, pa.Array]) -> set[tuple[int, int]]:
    table = pa.table(columns)
    k1, k2 = entity_keys(table, list(columns))
    return set(zip(k1.tolist(), k2.tolist()))


def test_keys_whose_naive_concatenations_collide_are_distinct():
    # Split points of strings, as strings and as (string, string).
    pairs = [("ab", "c"), ("a", "bc"), ("abc", ""), ("", "abc"), ("a\x00", "bc"), ("a", "\x00bc")]
    pair_keys = _keys({"x": pa.array([p[0] for p in pairs]), "y": pa.array([p[1] for p in pairs])})
    assert len(pair_keys) == len(pairs)
    # The same text as one string key of a one-field contract, and the composite (s, "") : no
    # two contracts share a ledger, but their encodings still differ.
    assert encode_keys(pa.table({"x": pa.array(["abc"])}), ["x"]).to_pylist() != \
        encode_keys(pa.table({"x": pa.array(["abc"]), "y": pa.array([""])}), ["x", "y"]).to_pylist()
    # An int and a string holding its bytes, a date and an int of the same days, string vs int.
    one = date(1970, 1, 2)
    kinds = [
        {"a": pa.array([1], pa.int64()), "b": pa.array(["x"])},
        {"a": pa.array(["\x00\x00\x00\x00\x00\x00\x00\x01"]), "b": pa.array(["x"])},
        {"a": pa.array([one]), "b": pa.array(["x"])},
        {"a": pa.array(["1"]), "b": pa.array(["x"])},
        {"a": pa.array(["x"]), "b": pa.array([1], pa.int64())},
    ]
    encoded = [encode_keys(pa.table(k), ["a", "b"]).to_pylist()[0] for k in kinds]
    assert len(set(encoded)) == len(kinds)
    assert len(set().union(*(_keys(k) for k in kinds))) == len(kinds)
    # A string ending where an int's bytes could continue it: ("a", 1) vs ("a\x00...", ...).
    tricky = _keys({"s": pa.array(["a", "a" + "\x00" * 8, "a" + "i"]), "n": pa.array([1, 1, 1], pa.int64())})
    assert len(tricky) == 3


def test_every_small_composite_key_is_distinct():
    # Exhaustive over a small domain: strings over {"", "a", "b", "ab", "\x00"} x ints -2..2 x two
    # string fields: a collision of two keys would show as fewer distinct (k1, k2) pairs.
    strings, ints = ["", "a", "b", "ab", "\x00", "a\x00"], [-2, -1, 0, 1, 2, 1 << 40]
    rows = list(itertools.product(strings, ints, strings))
    table = pa.table({"s": pa.array([r[0] for r in rows]), "n": pa.array([r[1] for r in rows], pa.int64()),
                      "t": pa.array([r[2] for r in rows])})
    encoded = encode_keys(table, ["s", "n", "t"]).to_pylist()
    assert len(set(encoded)) == len(rows) and encoded == [_reference_encoding(r) for r in rows]
    k1, k2 = entity_keys(table, ["s", "n", "t"])
    assert len(set(zip(k1.tolist(), k2.tolist()))) == len(rows)
    assert len(set(k1.tolist())) == len(rows)


def test_keys_are_per_row_whatever_the_array():
    rng = np.random.default_rng(5)
    n = 500
    table = pa.table({"s": pa.array([f"s{'x' * int(i)}" for i in rng.integers(0, 30, n)]),
                      "n": pa.array(rng.integers(-10**12, 10**12, n))})
    k1, k2 = entity_keys(table, ["s", "n"])
    for i in (0, 17, n - 1):
        one = entity_keys(table.slice(i, 1), ["s", "n"])
        assert (one[0][0], one[1][0]) == (k1[i], k2[i])
    chunked = pa.concat_tables([table.slice(0, 100), table.slice(100)])
    assert entity_keys(chunked, ["s", "n"])[0].tolist() == k1.tolist()


def test_null_or_unsupported_key_fields_are_refused():
    with pytest.raises(ValueError, match="never null"):
        entity_keys(pa.table({"a": pa.array([1, None]), "b": pa.array(["x", "y"])}), ["a", "b"])
    with pytest.raises(ValueError, match="key field 'f'"):
        entity_keys(pa.table({"f": pa.array([1.5])}), ["f"])
