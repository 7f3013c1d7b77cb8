"""Synthetic landing streams of full-state order events, and the oracle projection.

A landing source is a folder with one subfolder per source partition (``p0``,
``p1``, ...), each holding append-only JSONL segment files (``00000.jsonl``, ...)
read in file-name order.  Every line is one full-state order event::

    {"order_id": "o000000000001", "version": 2, "day": "2025-01-03",
     "cents": 1250, "deleted": false}

Two shapes: by default the stream advances over its days (new orders dated on the stream's current
day, corrections moving a day by up to a week), so a batch touches the few month partitions around
its time; with ``spread=True`` ("drifting": backfills and late corrections) every new order is
dated on a random day of the whole span and a day-moving correction moves the order to any day of
it, so with a span of three years every 100k batch touches all 36 month partitions.

The correct projection ("oracle"): per order the highest version wins; a deleted
highest version is a tombstone; the summary has one row per day with at least one
live order: ``day -> (sum of cents, count of orders)``.
"""

from __future__ import annotations

import gc
import json
from zlib import crc32
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from random import Random

# Cumulative thresholds of the event mix: new, correction, duplicate, late, delete.
_P_NEW, _P_CORRECT, _P_DUP, _P_LATE = 0.60, 0.80, 0.88, 0.94
_P_RECENT = 0.9  # share of follow-up events that target orders of the last week
_RECENT_DAYS = 7
_P_MOVE_DAY = 0.3  # share of corrections that also move the order's day
_P_SKIP_VERSION = 0.25  # share of corrections/deletes that skip a version (sent late)
_P_NULL_DELETE = 0.5  # share of deletes that null out day and cents


@dataclass(frozen=True)
class StreamStats:
    """What :func:`generate_stream` wrote."""

    events: int
    orders: int
    partitions: int
    segments: int
    new_orders: int
    corrections: int
    duplicates: int
    late_versions: int
    deletes: int
    first_day: date
    last_day: date


def partition_of(order_id: str, partitions: int) -> int:
    """Stable partition of an order (keyed routing, like a Kafka topic)."""
    return crc32(order_id.encode()) % partitions


def _line(oid: str, version: int, day: str, cents: int) -> str:
    return (
        f'{{"order_id": "{oid}", "version": {version}, "day": "{day}", '
        f'"cents": {cents}, "deleted": false}}'
    )


def _tombstone(oid: str, version: int, day: str | None, cents: int) -> str:
    if day is None:
        return f'{{"order_id": "{oid}", "version": {version}, "day": null, "cents": null, "deleted": true}}'
    return (
        f'{{"order_id": "{oid}", "version": {version}, "day": "{day}", '
        f'"cents": {cents}, "deleted": true}}'
    )


def generate_stream(
    out_dir: Path,
    *,
    events: int,
    partitions: int = 2,
    days: int = 90,
    start_day: date = date(2025, 1, 1),
    seed: int = 0,
    segment_size: int = 50_000,
    spread: bool = False,
) -> StreamStats:
    """Write a deterministic landing stream of ``events`` events under ``out_dir``.

    The stream advances evenly over ``days`` days from ``start_day``; new orders
    are dated on the stream's current day.  Follow-up events (corrections,
    duplicates, late older versions, deletes) mostly target orders created in the
    last week.  Some corrections and deletes skip a version whose event is sent
    later as a "late version"; other late versions re-send an earlier version.
    ``spread``: days of new orders and of day-moving corrections are drawn from the whole span
    instead (the follow-ups still target recently *arrived* orders); the default stream's bytes
    are unchanged by it. ``out_dir`` must not exist or be empty.
    """
    if events < 0 or partitions < 1 or days < 1 or segment_size < 1:
        raise ValueError("events >= 0, partitions >= 1, days >= 1, segment_size >= 1")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    was_enabled = gc.isenabled()
    gc.disable()  # millions of small acyclic objects: the cyclic GC only costs time
    try:
        return _write_stream(out_dir, events, partitions, days, start_day, seed, segment_size, spread)
    finally:
        if was_enabled:
            gc.enable()


def _write_stream(  # noqa: C901, PLR0915 - one hot loop, kept flat for speed
    out_dir: Path, events: int, partitions: int, days: int, start_day: date, seed: int, segment_size: int,
    spread: bool = False,
) -> StreamStats:
    """The body of :func:`generate_stream` (arguments already validated)."""
    for p in range(partitions):
        (out_dir / f"p{p}").mkdir(parents=True, exist_ok=True)

    rng = Random(seed)
    rand = rng.random
    day_iso = [(start_day + timedelta(days=d)).isoformat() for d in range(days + 8)]

    # Per-order state, indexed by order number (order ids are time-ordered).
    o_id: list[str] = []
    o_part: list[int] = []
    o_ver: list[int] = []
    o_day: list[int] = []  # day offset of the latest version (kept for tombstones)
    o_cents: list[int] = []
    o_deleted = bytearray()
    o_hist: list[list[tuple[int, str]]] = []  # emitted (version, line), by version
    gaps: dict[int, tuple[int, str]] = {}  # skipped version, to be sent late
    day_start: list[int] = []  # number of orders created before each day began

    buffers: list[list[str]] = [[] for _ in range(partitions)]
    seg_no = [0] * partitions
    counts = [0, 0, 0, 0, 0]  # new, correction, duplicate, late, delete
    min_day, max_day = 1 << 30, -1

    def flush(p: int) -> None:
        path = out_dir / f"p{p}" / f"{seg_no[p]:05d}.jsonl"
        path.write_text("\n".join(buffers[p]) + "\n", encoding="utf-8")
        seg_no[p] += 1
        buffers[p] = []

    def pick(n: int, cur: int) -> int:
        if rand() < _P_RECENT:
            lo = day_start[max(0, cur - _RECENT_DAYS + 1)]
            return lo + int(rand() * (n - lo))
        return int(rand() * n)

    def day_str(off: int) -> str:
        while off >= len(day_iso):
            day_iso.append((start_day + timedelta(days=len(day_iso))).isoformat())
        return day_iso[off]

    for i in range(events):
        cur = i * days // events
        while len(day_start) <= cur:
            day_start.append(len(o_id))
        n = len(o_id)
        r = rand()
        kind = 0
        k = -1
        if n and r >= _P_NEW:
            kind = 1 if r < _P_CORRECT else 2 if r < _P_DUP else 3 if r < _P_LATE else 4
            for _ in range(8):  # find a suitable target order
                k = pick(n, cur)
                if kind == 2 or (kind == 3 and o_ver[k] >= 2) or (kind in (1, 4) and not o_deleted[k]):
                    break
                k = -1
            if k < 0:
                kind = 0

        if kind == 0:  # new order on the current day (spread: on any day of the span)
            oid = f"o{n + 1:012d}"
            cents = 100 + int(rand() * 20_000)
            d = int(rand() * days) if spread else cur
            line = _line(oid, 1, day_iso[d], cents)
            o_id.append(oid)
            o_part.append(crc32(oid.encode()) % partitions)
            o_ver.append(1)
            o_day.append(d)
            o_cents.append(cents)
            o_deleted.append(0)
            o_hist.append([(1, line)])
            k = n
        elif kind in (1, 4):  # correction or delete: a higher version
            oid, v, d = o_id[k], o_ver[k] + 1, o_day[k]
            if rand() < _P_SKIP_VERSION and k not in gaps:
                gaps[k] = (v, _line(oid, v, day_str(d), 100 + int(rand() * 20_000)))
                v += 1
            if kind == 1:
                cents = 100 + int(rand() * 20_000)
                if rand() < _P_MOVE_DAY:
                    d = int(rand() * days) if spread else max(0, d + int(rand() * 15) - 7)
                line = _line(oid, v, day_str(d), cents)
                o_cents[k], o_day[k] = cents, d
            else:
                if rand() < _P_NULL_DELETE:
                    line = _tombstone(oid, v, None, 0)
                    d = -1
                else:
                    line = _tombstone(oid, v, day_str(d), o_cents[k])
                o_deleted[k] = 1
            o_ver[k] = v
            o_hist[k].append((v, line))
        elif kind == 2:  # exact re-delivery of an earlier event
            hist = o_hist[k]
            line = hist[int(rand() * len(hist))][1]
            d = -1
        else:  # late older version: a skipped version, or an earlier one re-sent
            hist = o_hist[k]
            gap = gaps.pop(k, None)
            if gap is not None:
                line = gap[1]
                hist.append(gap)
                hist.sort()
            else:
                older = [h for h in hist if h[0] < o_ver[k]]
                line = older[int(rand() * len(older))][1]
            d = -1
        if d >= 0:
            if d < min_day:
                min_day = d
            if d > max_day:
                max_day = d
        counts[kind] += 1
        p = o_part[k]
        buf = buffers[p]
        buf.append(line)
        if len(buf) >= segment_size:
            flush(p)

    for p in range(partitions):
        if buffers[p]:
            flush(p)
    if max_day < 0:
        min_day = max_day = 0
    return StreamStats(
        events=events,
        orders=len(o_id),
        partitions=partitions,
        segments=sum(seg_no),
        new_orders=counts[0],
        corrections=counts[1],
        duplicates=counts[2],
        late_versions=counts[3],
        deletes=counts[4],
        first_day=start_day + timedelta(days=min_day),
        last_day=start_day + timedelta(days=max_day),
    )


def _partition_key(path: Path) -> tuple[int, str]:
    """Sort ``p2`` before ``p10``; other names after, by name."""
    suffix = path.name[1:]
    return (int(suffix), path.name) if path.name.startswith("p") and suffix.isdigit() else (1 << 62, path.name)


def partition_dirs(stream_dir: Path) -> list[Path]:
    """The partition folders of a landing source, in partition order."""
    return sorted((p for p in Path(stream_dir).iterdir() if p.is_dir()), key=_partition_key)


def read_partition(part_dir: Path) -> Iterator[dict]:
    """All events of one partition folder, segment files in file-name order."""
    for seg in sorted(Path(part_dir).glob("*.jsonl")):
        with seg.open(encoding="utf-8") as fh:
            for raw in fh:
                if raw.strip():
                    yield json.loads(raw)


def read_stream(stream_dir: Path) -> Iterator[dict]:
    """All events of a landing folder: partition by partition, file-name order."""
    for part in partition_dirs(stream_dir):
        yield from read_partition(part)


def oracle_summary(events: Iterable[dict]) -> dict[date, tuple[int, int]]:
    """The correct projection ``day -> (cents, orders)`` of any event iterable.

    Per order the highest version wins, whatever the arrival order.  Raises
    ``ValueError`` if one (order_id, version) is seen with two different payloads.
    """
    latest: dict[str, tuple[int, bool, str | None, int | None]] = {}
    for ev in events:
        key = (int(ev["version"]), bool(ev["deleted"]), ev.get("day"), ev.get("cents"))
        oid = ev["order_id"]
        have = latest.get(oid)
        if have is None or key[0] > have[0]:
            latest[oid] = key
        elif key[0] == have[0] and key != have:
            raise ValueError(f"conflicting payloads for {oid} version {key[0]}")
    out: dict[date, tuple[int, int]] = {}
    for _version, deleted, day, cents in latest.values():
        if deleted:
            continue
        if day is None or cents is None:
            raise ValueError("live order without day or cents")
        d = date.fromisoformat(day)
        total, count = out.get(d, (0, 0))
        out[d] = (total + cents, count + 1)
    return out
