"""Tests of the synthetic stream generator and the oracle projection."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import defaultdict
from datetime import date
from pathlib import Path

import pytest

from lakepub.generate import StreamStats, generate_stream, oracle_summary, partition_of, read_stream


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StreamStats]:
    out = tmp_path_factory.mktemp("stream")
    stats = generate_stream(out, events=20_000, partitions=3, days=30, seed=7, segment_size=2_500)
    return out, stats


def test_deterministic(tmp_path: Path) -> None:
    a = generate_stream(tmp_path / "a", events=5_000, partitions=2, seed=3, segment_size=1_000)
    b = generate_stream(tmp_path / "b", events=5_000, partitions=2, seed=3, segment_size=1_000)
    generate_stream(tmp_path / "c", events=5_000, partitions=2, seed=4, segment_size=1_000)
    assert a == b
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")
    assert _tree_digest(tmp_path / "c") != _tree_digest(tmp_path / "a")  # the seed matters
    assert _tree_digest(tmp_path / "a") != _tree_digest(tmp_path / "c")


def test_counts_partitions_and_segments(stream: tuple[Path, StreamStats]) -> None:
    out, stats = stream
    assert sorted(p.name for p in out.iterdir()) == ["p0", "p1", "p2"]
    events = list(read_stream(out))
    assert len(events) == stats.events == 20_000
    assert stats.partitions == 3
    segments = sorted(out.glob("p*/*.jsonl"))
    assert len(segments) == stats.segments
    for part in out.iterdir():
        names = sorted(s.name for s in part.glob("*.jsonl"))
        assert names == [f"{i:05d}.jsonl" for i in range(len(names))]
        sizes = [len(s.read_text().splitlines()) for s in sorted(part.glob("*.jsonl"))]
        assert all(size == 2_500 for size in sizes[:-1]) and 0 < sizes[-1] <= 2_500
    kinds = stats.new_orders + stats.corrections + stats.duplicates + stats.late_versions + stats.deletes
    assert kinds == stats.events
    assert stats.orders == stats.new_orders == len({e["order_id"] for e in events})


def test_events_are_well_formed(stream: tuple[Path, StreamStats]) -> None:
    out, stats = stream
    for e in read_stream(out):
        assert set(e) == {"order_id", "version", "day", "cents", "deleted"}
        assert e["order_id"].startswith("o") and len(e["order_id"]) == 13
        assert isinstance(e["version"], int) and e["version"] >= 1
        assert isinstance(e["deleted"], bool)
        if e["day"] is None or e["cents"] is None:
            assert e["deleted"] and e["day"] is None and e["cents"] is None
        else:
            assert stats.first_day <= date.fromisoformat(e["day"]) <= stats.last_day
            assert isinstance(e["cents"], int) and e["cents"] >= 0
    assert stats.first_day == date(2025, 1, 1)


def test_no_conflicting_payloads(stream: tuple[Path, StreamStats]) -> None:
    out, _ = stream
    seen: dict[tuple[str, int], str] = {}
    for e in read_stream(out):
        payload = json.dumps(e, sort_keys=True)
        assert seen.setdefault((e["order_id"], e["version"]), payload) == payload


def test_each_order_lives_in_one_partition(stream: tuple[Path, StreamStats]) -> None:
    out, _ = stream
    homes: dict[str, set[str]] = defaultdict(set)
    for seg in out.glob("p*/*.jsonl"):
        for line in seg.read_text().splitlines():
            homes[json.loads(line)["order_id"]].add(seg.parent.name)
    assert all(len(parts) == 1 for parts in homes.values())
    assert all(parts == {f"p{partition_of(oid, 3)}"} for oid, parts in homes.items())


def test_produces_every_kind_of_event(stream: tuple[Path, StreamStats]) -> None:
    out, stats = stream
    assert stats.new_orders > 0.5 * stats.events
    for count in (stats.corrections, stats.duplicates, stats.late_versions, stats.deletes):
        assert count > 0.03 * stats.events
    # Check the kinds in the files themselves, per partition in arrival order.
    max_version: dict[str, int] = {}
    seen: set[str] = set()
    found = {"late": 0, "duplicate": 0, "delete_null": 0, "delete_kept": 0, "moved_day": 0}
    first_day: dict[str, str] = {}
    for e in read_stream(out):
        oid, v = e["order_id"], e["version"]
        line = json.dumps(e, sort_keys=True)
        found["duplicate"] += line in seen
        seen.add(line)
        found["late"] += v < max_version.get(oid, 0)
        max_version[oid] = max(v, max_version.get(oid, 0))
        if e["deleted"]:
            found["delete_null" if e["day"] is None else "delete_kept"] += 1
        elif e["day"] is not None:
            found["moved_day"] += first_day.setdefault(oid, e["day"]) != e["day"]
    assert all(n > 0 for n in found.values()), found
    orders = {e["order_id"] for e in read_stream(out)}
    assert sorted(orders) == [f"o{i:012d}" for i in range(1, len(orders) + 1)]


def test_new_orders_follow_the_stream_day(tmp_path: Path) -> None:
    generate_stream(tmp_path / "s", events=9_000, partitions=1, days=90, seed=1)
    first_day = {e["order_id"]: e["day"] for e in read_stream(tmp_path / "s") if e["version"] == 1}
    # Order ids are time-ordered, and each order is created on the stream's current day.
    new_days = [date.fromisoformat(first_day[oid]) for oid in sorted(first_day)]
    assert new_days == sorted(new_days)
    assert new_days[0] == date(2025, 1, 1) and new_days[-1] == date(2025, 3, 31)


def test_refuses_non_empty_output(tmp_path: Path) -> None:
    (tmp_path / "junk").write_text("x")
    with pytest.raises(FileExistsError):
        generate_stream(tmp_path, events=10)


def test_oracle_classic_case_all_orderings() -> None:
    a1 = {"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 100, "deleted": False}
    a2 = {"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": False}
    b2 = {"order_id": "B", "version": 2, "day": None, "cents": None, "deleted": True}
    b1 = {"order_id": "B", "version": 1, "day": "2025-10-01", "cents": 70, "deleted": False}
    orderings = list(itertools.permutations([a1, a2, b2, b1]))
    assert len(orderings) == 24
    for ordering in orderings:
        assert oracle_summary(ordering) == {date(2025, 10, 2): (150, 1)}


def test_oracle_duplicates_and_conflicts() -> None:
    a1 = {"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 100, "deleted": False}
    assert oracle_summary([a1, dict(a1), dict(a1)]) == {date(2025, 10, 1): (100, 1)}
    with pytest.raises(ValueError, match="conflicting"):
        oracle_summary([a1, {**a1, "cents": 101}])
    assert oracle_summary([]) == {}


def test_oracle_is_order_independent_on_a_stream(stream: tuple[Path, StreamStats]) -> None:
    out, stats = stream
    events = list(read_stream(out))
    forward = oracle_summary(events)
    assert oracle_summary(reversed(events)) == forward
    assert sum(orders for _, orders in forward.values()) < stats.orders  # some deletes won


def test_a_spread_stream_touches_every_month_in_every_batch(tmp_path: Path) -> None:
    """The drifting stream of benchmark 1 (issue 10): days over the whole span, in every batch."""
    stats = generate_stream(tmp_path / "s", events=20_000, partitions=1, days=1095, seed=7,
                            segment_size=5_000, spread=True)
    assert stats.segments == 4 and sorted(p.name for p in (tmp_path / "s" / "p0").iterdir()) == [
        "00000.jsonl", "00001.jsonl", "00002.jsonl", "00003.jsonl"]
    events = list(read_stream(tmp_path / "s"))
    months_per_batch = [{e["day"][:7] for e in events[i:i + 2_000] if e["day"]} for i in range(0, 20_000, 2_000)]
    assert all(len(months) == 36 for months in months_per_batch), [len(m) for m in months_per_batch]
    versions: dict[str, dict[int, str]] = defaultdict(dict)
    for e in events:
        versions[e["order_id"]][e["version"]] = e["day"]
    moved = sum(1 for days in versions.values() if len({d for d in days.values() if d}) > 1)
    far = sum(1 for days in versions.values()
              if len({d[:7] for d in days.values() if d}) > 1)  # moved to another month
    assert moved > 500 and far > 0.5 * moved, (moved, far)
    assert oracle_summary(events)  # well-formed for the oracle: no conflicting payloads
