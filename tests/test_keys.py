"""Order keys (lakepub.keys): stable forever for stored ledgers, distinct for distinct ids, and
the lookup of a ledger created before them still works by order_id."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import A1, A2, B1, B2, summary_rows, write_jsonl
from lakepub.generate import generate_stream, read_stream
from lakepub.init import init_workspace
from lakepub.keys import ORDER_KEYS_V1, ORDER_KEYS_V2, ORDER_KEYS_VERSION, order_keys
from lakepub.maintenance.compact import compact_ledger
from lakepub.store.layout import LEDGER_SCHEMA, ORDER_KEYS_PROPERTY, has_order_keys, ledger_id
from lakepub.workspace import Workspace

GOLDEN = ["", "a", "a\x00", "o000000000001", "order-with-a-longer-id-0042"]


def test_order_keys_never_change():
    """Ledgers store these keys: a change of the function would make lookups miss stored rows."""
    k1, k2 = order_keys(pa.array(GOLDEN), ORDER_KEYS_V1)
    assert list(map(int, k1)) == [-7046029254386353131, 7075883509774426401, 5718913436695043505,
                                  -199795993605439989, 7452549451470683614]
    assert list(map(int, k2)) == [-4417276706812531889, -3742030766074404754, -1048510931955997874,
                                  -3996246018768516590, 5049853994296809469]


GOLDEN_V2 = GOLDEN + ["ORD-00001", "MRD-00001\x00\x00", "c\x00\x00", "é" * 9]


def test_order_keys_v2_never_change():
    """New ledgers store v2 keys (v1 stays as above for the ledgers created with it)."""
    assert ORDER_KEYS_VERSION == ORDER_KEYS_V2
    k1, k2 = order_keys(pa.array(GOLDEN_V2))
    assert list(map(int, k1)) == [-2152535657050944081, -2722093904537314626, 7850561713998068440,
                                  -2623735980869453510, -7536097427536679475, -3606062312359461123,
                                  -2637021259179874387, -5971194543001421892, -2386497737617193074]
    assert list(map(int, k2)) == [-2593627384463700222, -8991219404560258774, 2867774716158335771,
                                  -9154540952335180658, 6822549214807968007, 1027235382821627795,
                                  8179335508323161424, 4840818237476358925, -2437152154405537297]
    assert [_reference_v2(value) for value in GOLDEN_V2] == list(zip(map(int, k1), map(int, k2)))


_M = (1 << 64) - 1


def _reference_v2(text: str) -> tuple[int, int]:
    """v2 for one id in plain Python, as lakepub/keys.py's docstring states it."""
    def mix(x: int) -> int:
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
        return x ^ (x >> 31)

    data = text.encode()
    n = len(data)
    k1 = mix(0x9E3779B97F4A7C15 ^ n)
    k2 = mix(((0xC2B2AE3D27D4EB4F + n) * 0xFF51AFD7ED558CCD) & _M)
    for w in range((n + 7) // 8):
        word = int.from_bytes(data[8 * w: 8 * w + 8].ljust(8, b"\0"), "little")
        k1 = mix(k1 ^ word)
        k2 = mix((((k2 ^ word) * 0xFF51AFD7ED558CCD) + w + 1) & _M)
    signed = lambda x: x - (1 << 64) if x >> 63 else x  # noqa: E731
    return signed(k1), signed(k2)


def _structured_ids() -> list[str]:
    """Ids built to hit length/data interactions: NUL padding, lengths whose difference equals a
    data-byte difference (the v1 collision), prefixes, every length, one byte changed anywhere."""
    base = "ORD-0001-order-with-a-long-id-0042-xyzw"  # 39 bytes
    ids = {""}
    for stem in ["a", "c", "ORD-00001", "MRD-00001", "x" * 8, "x" * 16, "é", base]:
        ids.update(stem + "\0" * pad for pad in range(18))
    for length in range(41):
        for fill in ("a", "\0", "\x7f"):
            ids.update((fill * length) + "\0" * pad for pad in range(10))
    for a in range(25):  # a byte of the first word offset by the length difference, NUL-padded
        for b in range(a + 1, 25):
            for at in range(min(a, 8)):
                stem = base[:a]
                for changed in (ord(stem[at]) ^ (a ^ b), ord(stem[at]) + (b - a), ord(stem[at]) - (b - a)):
                    if 0 <= changed < 0x80:
                        ids.add(stem[:at] + chr(changed) + stem[at + 1:] + "\0" * (b - a))
    ids.update(base[:i] for i in range(len(base) + 1))  # prefixes
    ids.update(base[i:] for i in range(len(base) + 1))  # suffixes
    for i in range(len(base)):
        for c in ("\0", "\x01", "A", "~", "é"):
            ids.add(base[:i] + c + base[i + 1:])
    return sorted(ids)


def test_order_keys_v2_separate_structured_ids():
    ids = _structured_ids()
    assert len(ids) > 3000
    k1, k2 = order_keys(pa.array(ids))
    # Each key alone separates them (two 64-bit keys: a pair collision would be ~2^-128).
    assert len(set(k1.tolist())) == len(ids) and len(set(k2.tolist())) == len(ids)
    for i in range(0, len(ids), 97):  # the vectorised paths compute the stated function
        assert _reference_v2(ids[i]) == (int(k1[i]), int(k2[i]))
    # v1 (kept for its ledgers) is the function these ids break: its length cancels.
    v1 = order_keys(pa.array(ids), ORDER_KEYS_V1)
    assert len(set(zip(v1[0].tolist(), v1[1].tolist()))) < len(ids)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=60))
def test_order_keys_are_per_string_and_independent_of_the_array(ids):
    k1, k2 = order_keys(pa.array(ids, pa.string()))
    for i, value in enumerate(ids):  # the same id gets the same key alone, sliced or chunked
        one = order_keys(pa.array([value], pa.string()))
        assert (one[0][0], one[1][0]) == (k1[i], k2[i])
    assert len(set(zip(k1.tolist(), k2.tolist()))) == len(set(ids))
    if len(ids) > 2:
        chunked = pa.chunked_array([pa.array(ids[:2], pa.string()), pa.array(ids[2:], pa.string())])
        assert order_keys(chunked)[0].tolist() == k1.tolist()
        sliced = pa.array(ids, pa.string()).slice(1)
        assert order_keys(sliced)[1].tolist() == k2.tolist()[1:]


def test_a_ledger_created_without_order_keys_is_looked_up_by_order_id(ws: Workspace):
    legacy = LEDGER_SCHEMA.select("order_id", "version", "day", "cents", "deleted", "batch_id", "floor")
    ws.catalog.create_namespace("lakepub")
    ws.catalog.create_table(ledger_id("lakepub", "orders_daily"), schema=legacy)
    for i, event in enumerate([A1, A2, B2, B1]):  # the seed's order example, an event per publish
        ws.publish("orders_daily", [event], start={"p0": i}, end={"p0": i + 1})
    ledger = ws.catalog.load_table(ledger_id("lakepub", "orders_daily"))
    assert not has_order_keys(ledger) and "k1" not in ledger.schema().column_names
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ws.verify("orders_daily", deep=True).ok
    compact_ledger(ws, "orders_daily")  # compaction keeps the legacy schema
    ws.publish("orders_daily", [A1, B1], start={"p0": 4}, end={"p0": 6})  # old versions: still ignored
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ws.verify("orders_daily", deep=True).ok


def test_a_long_id_among_short_ones_gets_its_own_keys():
    """The variable-width path folds each id over its own words (work follows the bytes)."""
    ids = ["o1", "x" * 20_000 + "é", "o22", ""]
    k1, k2 = order_keys(pa.array(ids))
    for i, value in enumerate(ids):
        one = order_keys(pa.array([value]))
        assert (one[0][0], one[1][0]) == (k1[i], k2[i])


# --- ids whose v1 keys collide, through the CLI; a ledger created with v1 keeps v1 ------------


def _set_key_index(root: Path, on: bool) -> None:
    config = yaml.safe_load((root / "lakepub.yaml").read_text())
    config["key_index"] = on
    (root / "lakepub.yaml").write_text(yaml.safe_dump(config))


def _publish(cli, path: Path, events: list[dict], start: int):
    write_jsonl(path, events)
    return cli("publish", "orders_daily", "--events", str(path), "--source", "orders", "--format", "json",
               "--start", f'{{"p0":{start}}}', "--end", f'{{"p0":{start + len(events)}}}')


def _order(order_id: str, version: int, day: str, cents: int) -> dict:
    return {"order_id": order_id, "version": version, "day": day, "cents": cents, "deleted": False}


@pytest.mark.parametrize("index", [True, False], ids=["key-index", "duckdb-join"])
def test_ids_differing_by_trailing_nuls_are_different_orders(ws_path: Path, cli, tmp_path: Path, index: bool):
    """"ORD-00001"/"MRD-00001\\0\\0" and "a"/"c\\0\\0" shared both v1 keys: the second of each pair
    was taken for the first (a payload conflict, or lost as stale/duplicate)."""
    _set_key_index(ws_path, index)
    first = _publish(cli, tmp_path / "1.jsonl", [_order("ORD-00001", 1, "2025-10-01", 100),
                                                  _order("a", 1, "2025-10-01", 1)], 0)
    assert first.code == 0, first.err
    second = _publish(cli, tmp_path / "2.jsonl", [_order("MRD-00001\0\0", 1, "2025-10-02", 50),
                                                   _order("c\0\0", 1, "2025-10-02", 2)], 2)
    assert second.code == 0, second.err
    assert second.json()["counts"]["new_versions"] == 2 and second.json()["counts"]["stale"] == 0
    third = _publish(cli, tmp_path / "3.jsonl", [_order("MRD-00001\0\0", 2, "2025-10-03", 50),
                                                  _order("a", 2, "2025-10-03", 1)], 4)
    assert third.code == 0, third.err
    ws = Workspace.open(ws_path)
    assert summary_rows(ws) == [("2025-10-01", 100, 1), ("2025-10-02", 2, 1), ("2025-10-03", 51, 2)]
    ledger = ws.catalog.load_table(ledger_id("lakepub", "orders_daily"))
    assert ledger.metadata.properties[ORDER_KEYS_PROPERTY] == ORDER_KEYS_V2
    assert cli("verify", "orders_daily", "--deep").code == 0


@pytest.mark.parametrize("index", [True, False], ids=["key-index", "duckdb-join"])
def test_a_ledger_created_with_v1_keys_keeps_them(ws_path: Path, tmp_path: Path, index: bool):
    """A ledger created before v2 (its table property says v1) is looked up and appended with v1,
    through the index and the join, and compaction keeps its version; same answers as a v2 one."""
    _set_key_index(ws_path, index)
    old = Workspace.open(ws_path)
    old.catalog.create_namespace("lakepub")
    old.catalog.create_table(ledger_id("lakepub", "orders_daily"), schema=LEDGER_SCHEMA,
                             properties={ORDER_KEYS_PROPERTY: ORDER_KEYS_V1})
    new = tmp_path / "new"
    init_workspace(new)
    _set_key_index(new, index)
    for root in (ws_path, new):
        landing = Workspace.open(root).config.landing_dir("orders")
        generate_stream(landing, events=1500, partitions=2, days=20, seed=3, segment_size=300)
        Workspace.open(root).run("orders_daily", max_batch=300)
    old, fresh = Workspace.open(ws_path), Workspace.open(new)
    assert summary_rows(old) == summary_rows(fresh)
    for ws, version in ((old, ORDER_KEYS_V1), (fresh, ORDER_KEYS_V2)):
        ledger = ws.catalog.load_table(ledger_id("lakepub", "orders_daily"))
        assert ledger.metadata.properties[ORDER_KEYS_PROPERTY] == version
        rows = ledger.scan().to_arrow()
        k1, k2 = order_keys(rows.column("order_id"), version)
        assert rows.column("k1").to_pylist() == k1.tolist() and rows.column("k2").to_pylist() == k2.tolist()
        assert ws.verify("orders_daily", deep=True).ok
    compact_ledger(old, "orders_daily")
    old = Workspace.open(ws_path)
    ledger = old.catalog.load_table(ledger_id("lakepub", "orders_daily"))
    assert ledger.metadata.properties[ORDER_KEYS_PROPERTY] == ORDER_KEYS_V1
    before = summary_rows(old)
    events = list(read_stream(old.config.landing_dir("orders")))
    replay = old.publish("orders_daily", events, source="replay", start={}, end={"r0": len(events)})
    assert replay.counts.new_versions == 0 and replay.counts.entities_changed == 0  # every order found
    newer = [dict(e, version=e["version"] + 100) for e in events[:50]]
    moved = old.publish("orders_daily", newer, source="replay", start={"r0": len(events)},
                        end={"r0": len(events) + 50})
    assert moved.counts.new_versions > 0
    assert old.verify("orders_daily", deep=True).ok
    assert summary_rows(old) != before
