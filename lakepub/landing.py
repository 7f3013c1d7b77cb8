"""Landing sources: a folder per source, one subfolder per partition, append-only JSONL segments.

::

    landing/orders/p0/00000.jsonl
    landing/orders/p0/00001.jsonl
    landing/orders/p1/00000.jsonl

Segments are read in file-name order. The position of a partition is the number of records
(non-blank lines) consumed from it, so a committed position vector names exactly which records
have been published, whatever the batch sizes were.

A line counts once its newline is written: the newest segment of a partition may end in a line
a producer is still writing, which is neither counted nor read until it is complete (it then
becomes the next position). An older segment cannot grow any more, so its unterminated last line
is a record. Partition folder names follow ``positions.NAME``.

``lakepub run`` starts reading before it has imported the publisher (``LandingSource.prefetch``,
issue 10): segments are counted and the pending ones parsed on a thread from a guessed position,
up to 64 MB of JSON (the first pending segment however large). The invariant: the prefetch is only a cache of what a read would return,
keyed by (path, size, mtime, bytes read) and used only if the file still holds the bytes it
parsed (compared when it is used); whatever it guessed or did wrong is read again where it is
needed, so what a run publishes never depends on it (``tests/test_prefetch.py``). Cost: the
parse moves into the ~0.3 s of imports, where the second core was idle (drifting 1M-event run,
prefetch on vs off: wall 0.91x, CPU 0.94x at load 10; README, benchmark 1).
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from lakepub.errors import InvalidEvent, InvalidPosition
from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.contract.validate import empty_events, read_jsonl_events
from lakepub.positions import NAME_RULE, Vector, valid_name


_BLANK_START = np.array([10, 13, 32, 9], dtype=np.uint8)  # \n \r space tab


@dataclass(frozen=True)
class SegmentCount:
    records: int  # non-blank newline-terminated lines
    size: int  # bytes of those lines (up to and including the last newline)
    tail: bool  # an unterminated non-blank last line follows them

    def complete(self, last: bool) -> tuple[int, int | None]:
        """(records, bytes to read) of a segment; only the newest one's tail may still be growing."""
        return (self.records, self.size) if last or not self.tail else (self.records + 1, None)


def count_records(path: Path) -> SegmentCount:
    """Count the non-blank newline-terminated lines of a segment (whitespace-only lines are blank,
    as for pyarrow), and whether a partial line follows them.

    Vectorised: when no line starts with whitespace (so none can be blank), the count is the
    number of newlines; otherwise lines are stripped one by one.
    """
    data = path.read_bytes()
    size = data.rfind(b"\n") + 1
    tail = bool(data[size:].strip())
    if not size:
        return SegmentCount(0, 0, tail)
    raw = np.frombuffer(data, dtype=np.uint8, count=size)
    starts = raw[np.flatnonzero(raw[:-1] == 10) + 1]
    if raw[0] not in _BLANK_START and not np.isin(starts, _BLANK_START).any():
        return SegmentCount(len(starts) + 1, size, tail)
    return SegmentCount(sum(1 for line in data[:size].split(b"\n") if line.strip()), size, tail)


@dataclass(frozen=True)
class Backlog:
    pending: Vector  # records not yet consumed, per partition
    available: Vector  # records present, per partition
    oldest_unprocessed: Path | None  # the segment holding the oldest unconsumed record
    oldest_age_s: float | None  # its age (from the segment's modification time)
    missing: Vector = field(default_factory=dict)  # committed offsets beyond the records found here
    oldest_age_by_partition: dict[str, float] = field(default_factory=dict)  # per partition with pending records

    @property
    def total_pending(self) -> int:
        return sum(self.pending.values())


def _cancel(future: Future | None) -> None:
    if future is not None:
        future.cancel()


def _segment_bytes(segment: Path, size: int | None) -> bytes:
    """The bytes of a segment a read parses: its first ``size`` (only the complete lines: a
    producer may still be writing the last one), or all of it."""
    with open(segment, "rb") as fh:
        return fh.read(-1 if size is None else size)


def _stat_key(segment: Path) -> tuple[Path, int, int]:
    stat = segment.stat()
    return (segment, stat.st_size, stat.st_mtime_ns)


class LandingSource:
    def __init__(self, folder: Path, contract: Contract = ORDERS_CONTRACT):
        """``contract``: what every record must be (validated as it is read)."""
        self.folder = Path(folder)
        self.contract = contract
        self._counts: dict[tuple[Path, int, int], SegmentCount] = {}
        self._parsed: dict[tuple, Future[tuple[bytes, pa.Table]]] = {}  # by prefetch(), each read once
        self._early: tuple[threading.Event, threading.Event] | None = None  # prefetch(): counted, planned

    def prefetch(self, guess: Callable[[], Vector | None], budget: int = 64 << 20) -> "LandingSource":
        """Count every segment, then parse the pending segments from the position ``guess()``
        returns (partitions in turn, up to ``budget`` bytes of JSON but at least the first pending
        segment, however large; nothing if it returns None)
        on a thread, while the process goes on importing and opening the catalog (``lakepub
        run``: pyarrow's JSON reader, file reads and numpy release the GIL; the parse uses this
        one thread, leaving the other core to the imports).

        Only a cache: counts are keyed by (path, size, mtime) like ``count``'s, a parsed segment by
        that and the bytes read, and whatever the thread did not do or got wrong (an error, a bad
        guess, a file changed since) is done again where it is needed, which reports its errors.
        A parse is kept with the bytes it parsed and used only if the file still holds them
        (``read_segment`` reads them again and compares: a file rewritten in place or replaced with
        the same size and modification time is parsed again).
        """
        counted, planned = threading.Event(), threading.Event()
        self._early = (counted, planned)

        def work() -> None:
            try:
                self.count_all()
                counted.set()
                committed = guess()
                planned_reads = self._plan(committed, budget) if committed is not None else []
                plan = [(key, size, Future()) for key, size in planned_reads]
                self._parsed.update((key, future) for key, _, future in plan)
            except Exception:  # noqa: BLE001 - the main path does it again and reports it
                return
            finally:
                counted.set()
                planned.set()
            for key, size, future in plan:
                if future.set_running_or_notify_cancel():  # not dropped as a wrong guess
                    try:
                        data = _segment_bytes(key[0], size)
                        future.set_result((data, self._read(key[0], size, use_threads=False, data=data)))
                    except Exception as exc:  # noqa: BLE001 - read again where it is needed
                        future.set_exception(exc)

        threading.Thread(target=work, name="lakepub-prefetch").start()
        return self

    def _plan(self, committed: Vector, budget: int) -> list[tuple[tuple, int | None]]:
        """(cache key, bytes to read) of the pending segments, in the order batches read them."""
        queues = []
        for part in self.partitions():
            segments, offset, queue = self.segments(part), committed.get(part, 0), []
            for i, seg in enumerate(segments):
                n, size = self.count(seg, last=i == len(segments) - 1)
                if offset < n:
                    queue.append(((*_stat_key(seg), size), size))
                offset = max(0, offset - n)
            queues.append(queue)
        plan: list[tuple[tuple, int | None]] = []
        for round_ in itertools.zip_longest(*queues):
            for item in filter(None, round_):
                budget -= item[1] if item[1] is not None else item[0][1]
                if budget < 0 and plan:
                    return plan
                plan.append(item)
        return plan

    def _wait_prefetch(self, planned: bool = False) -> None:
        if self._early is not None and threading.current_thread().name != "lakepub-prefetch":
            self._early[1 if planned else 0].wait()

    def _read(self, segment: Path, size: int | None, use_threads: bool = True, data: bytes | None = None) -> pa.Table:
        """Parse ``data`` (the segment's bytes ``_segment_bytes`` returned), else the segment."""
        if data is None and size is None:
            return read_jsonl_events(segment, self.contract, use_threads=use_threads)
        data = _segment_bytes(segment, size) if data is None else data
        return read_jsonl_events(data, self.contract, str(segment), use_threads=use_threads)

    def read_segment(self, segment: Path, size: int | None) -> pa.Table:
        """A segment's records (its first ``size`` bytes; None: all), parsed by ``prefetch`` if it
        read the same file in the same state, else now."""
        self._wait_prefetch(planned=True)
        future = self._parsed.pop((*_stat_key(segment), size), None)
        for stale in [k for k in list(self._parsed) if k[0] == segment]:  # parsed before the file changed
            _cancel(self._parsed.pop(stale, None))
        # One the thread has not started is read here (cancel() succeeds only then), in parallel
        # with what the thread is parsing; one it started or finished is waited for, and used only
        # if the file still holds the bytes it parsed (the same size and mtime do not prove it:
        # a rewrite in place, a replace by rename, ``cp -p``). Reading and comparing them costs
        # ~15% of parsing them (28 MB: 0.016 vs 0.12 s CPU), and the thread holds the bytes it
        # parsed until they are used (up to the budget, beside their tables: ~1/3 of their size).
        if future is not None and not future.cancel() and future.exception() is None:
            parsed, table = future.result()
            data = _segment_bytes(segment, size)
            return table if data == parsed else self._read(segment, size, data=data)
        return self._read(segment, size)  # not prefetched, or failed there: this reports why

    def drop_prefetched(self, keep: Callable[[Path], bool]) -> None:
        """Forget the segments ``prefetch`` parsed that ``keep`` says will not be read (a wrong guess)."""
        self._wait_prefetch(planned=True)
        # A snapshot of the keys: after an interrupted run (Ctrl-C while the read-ahead thread
        # is still reading) ``lakepub run`` drops from the main thread while that one pops.
        for key in [k for k in list(self._parsed) if not keep(k[0])]:
            _cancel(self._parsed.pop(key, None))

    def count(self, segment: Path, last: bool = False) -> tuple[int, int | None]:
        """(records, bytes holding them; None = all) of a segment, ``last`` if it is its partition's
        newest; cached while its size and modification time are unchanged."""
        self._wait_prefetch()
        key = _stat_key(segment)
        if key not in self._counts:
            self._counts[key] = count_records(segment)
        return self._counts[key].complete(last)

    def count_all(self) -> None:
        """Count every segment not counted yet, two at a time (file reads and numpy release the GIL)."""
        self._wait_prefetch()
        keys = [key for part in self.partitions() for key in map(_stat_key, self.segments(part))
                if key not in self._counts]
        if len(keys) < 2:
            return
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakepub-count") as pool:
            for key, n in zip(keys, pool.map(lambda k: count_records(k[0]), keys)):
                self._counts[key] = n

    def exists(self) -> bool:
        return self.folder.is_dir()

    def partitions(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        names = sorted(p.name for p in self.folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        for name in names:
            if not valid_name(name):
                raise InvalidPosition(f"landing partition folder {self.folder / name}: the name {name!r} is not "
                                      f"valid, use {NAME_RULE}")
        return names

    def segments(self, partition: str) -> list[Path]:
        """Segment files in name order; hidden files (a producer's temp files) are not segments."""
        return sorted(p for p in (self.folder / partition).glob("*.jsonl") if not p.name.startswith("."))

    def backlog(self, committed: Vector, now: float | None = None) -> Backlog:
        now = time.time() if now is None else now
        self.count_all()
        pending, available = {}, {}
        oldest: tuple[float, Path] | None = None
        mtimes: dict[str, float] = {}
        for part in self.partitions():
            offset, total, first_pending = committed.get(part, 0), 0, None
            segments = self.segments(part)
            for i, seg in enumerate(segments):
                n = self.count(seg, last=i == len(segments) - 1)[0]
                if first_pending is None and total + n > offset:
                    first_pending = seg
                total += n
            if first_pending is not None:
                mtime = mtimes[part] = first_pending.stat().st_mtime
                if oldest is None or mtime < oldest[0]:
                    oldest = (mtime, first_pending)
            available[part] = total
            pending[part] = max(0, total - offset)
        missing = {p: committed[p] for p in committed if committed[p] > available.get(p, 0)}
        return Backlog(pending, available, oldest[1] if oldest else None, now - oldest[0] if oldest else None,
                       missing, {p: now - m for p, m in mtimes.items()})

    def batches(self, committed: Vector, max_batch: int,
                until: Vector | None = None) -> Iterator[tuple[pa.Table, Vector, Vector]]:
        """Yield (events, start, end) batches of at most ``max_batch`` records, from ``committed`` on
        (up to ``until``, when given: a partition it does not name yields nothing)."""
        if max_batch < 1:
            raise InvalidPosition("--max-batch must be at least 1")
        self._wait_prefetch()
        cursors = {p: _Cursor(self.segments(p), committed.get(p, 0), self.count, self.read_segment, self.contract,
                              self.folder / p)
                   for p in self.partitions()}
        ahead = {seg for c in cursors.values() for seg in c.ahead()}
        self.drop_prefetched(lambda seg: seg in ahead)  # what a wrong guess parsed is not kept for the run
        position = {p: committed.get(p, 0) for p in cursors}
        if until is not None:
            for p, n in until.items():
                if n > position.get(p, 0) + (cursors[p].remaining if p in cursors else 0):
                    raise InvalidPosition(f"{self.folder / p} holds fewer records than position {p}={n}")
        while True:
            remaining = {p: c.remaining if until is None else max(0, min(c.remaining, until.get(p, 0) - position[p]))
                         for p, c in cursors.items()}
            shares = _shares(remaining, max_batch)
            if not any(shares.values()):
                return
            start = dict(position)
            parts = [cursors[p].take(n) for p, n in shares.items() if n]
            for p, n in shares.items():
                position[p] += n
            yield pa.concat_tables(parts), start, dict(position)


def _shares(remaining: dict[str, int], max_batch: int) -> dict[str, int]:
    """Split a batch fairly between partitions; a partition with less left cedes its share."""
    shares = {p: 0 for p in remaining}
    budget = max_batch
    open_parts = [p for p, r in remaining.items() if r > 0]
    while budget > 0 and open_parts:
        each = max(1, budget // len(open_parts))
        for p in list(open_parts):
            take = min(each, remaining[p] - shares[p], budget)
            shares[p] += take
            budget -= take
            if shares[p] >= remaining[p]:
                open_parts.remove(p)
            if budget == 0:
                break
    return shares


class _Cursor:
    """Reads one partition's records sequentially from an offset, a segment at a time."""

    def __init__(self, segments: list[Path], offset: int, count: Callable[[Path, bool], tuple[int, int | None]],
                 read: Callable[[Path, int | None], pa.Table], contract: Contract = ORDERS_CONTRACT,
                 folder: Path | None = None):
        self._segments = list(segments)
        self._read = read
        self._contract = contract
        counted = [count(s, i == len(self._segments) - 1) for i, s in enumerate(self._segments)]
        self._counts = [n for n, _ in counted]
        self._sizes = [size for _, size in counted]  # what was counted is what is read
        self._index, self._skip = 0, offset
        while self._index < len(self._segments) and self._skip >= self._counts[self._index]:
            self._skip -= self._counts[self._index]
            self._index += 1
        if self._index == len(self._segments) and self._skip > 0:
            raise InvalidPosition(
                f"{folder or 'this partition'}: the committed position {folder.name + '=' if folder else ''}{offset} "
                f"is beyond its {sum(self._counts)} record(s) (published from elsewhere, or segments were removed); "
                "nothing was published: restore the segments, or give --landing the folder the position counts")
        self.remaining = sum(self._counts[self._index:]) - self._skip
        self._loaded: pa.Table | None = None

    def ahead(self) -> list[Path]:
        """The segments still to be read."""
        return self._segments[self._index:]

    def take(self, n: int) -> pa.Table:
        parts: list[pa.Table] = []
        while n > 0:
            if self._loaded is None:
                segment, size = self._segments[self._index], self._sizes[self._index]
                table = self._read(segment, size)
                if table.num_rows != self._counts[self._index]:
                    # Positions count lines; a record spread over lines, or several on one line,
                    # would shift every position after it, so refuse the segment.
                    raise InvalidEvent(str(segment), "-", f"holds {table.num_rows} JSON records on "
                                       f"{self._counts[self._index]} non-blank lines; JSON Lines needs "
                                       "exactly one object per line")
                self._loaded = table.slice(self._skip)
                self._skip = 0
            chunk = self._loaded.slice(0, n)
            parts.append(chunk)
            n -= chunk.num_rows
            self.remaining -= chunk.num_rows
            self._loaded = self._loaded.slice(chunk.num_rows)
            if self._loaded.num_rows == 0:
                self._loaded = None
                self._index += 1
        return pa.concat_tables(parts) if parts else empty_events(self._contract)
