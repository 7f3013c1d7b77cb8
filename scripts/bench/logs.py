"""What logging costs the publish path: the log helpers per batch off and on, and `run` with JSON logs vs without.

    python scripts/bench/logs.py [--quick] [--json PATH] [--work DIR]

1. Per batch, the publish path calls ``batch_started``, ``projected``, ``batch_done`` (and
   ``run_started``/``run_done`` once per run). Timed here with logs off (the CLI's default text
   level, warning) against an empty Python call, and on (``--log-format json -v`` into /dev/null).
2. ``Workspace.run`` of the same stream into fresh workspaces, alternating logs off / JSON logs at
   debug into /dev/null (best of N each): the ratio is what an operator pays for JSON logs.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import common as c  # puts the checkout first on sys.path

from lakepub import logs
from lakepub.generate import generate_stream
from lakepub.init import init_workspace
from lakepub.store.record import Counts
from lakepub.workspace import Workspace


@dataclass
class _Result:  # the fields batch_done reads from a PublishResult
    dataset: str = "orders_daily"
    batch_id: str = "0" * 64
    snapshot_id: int = 1234567890123456789
    source: str = "orders"
    start: dict = field(default_factory=lambda: {"p0": 0})
    end: dict = field(default_factory=lambda: {"p0": 100_000})
    attempts: int = 1
    status: str = "published"
    counts: Counts = field(default_factory=lambda: Counts(events=100_000, entities_changed=80_000))
    partitions: list = field(default_factory=lambda: ["2025-10"])
    datasets: dict = field(default_factory=lambda: {"orders_daily": ["2025-10"]})


def _per_batch(n: int) -> float:
    result = _Result()
    began = time.perf_counter()
    for _ in range(n):
        logs.batch_started("orders_daily", result.batch_id, "orders", result.start, result.end, 100_000)
        logs.projected("orders_daily", result.batch_id, 1, 42, 88_000)
        logs.batch_done(result, 0.1)
    return (time.perf_counter() - began) / n


def _empty(n: int) -> float:
    def nothing(*args, **kwargs):
        return None

    began = time.perf_counter()
    for _ in range(n):
        nothing("orders_daily", "0", "orders", {}, {}, 1)
        nothing("orders_daily", "0", 1, 42, 1)
        nothing(None, 0.1)
    return (time.perf_counter() - began) / n


def _run_once(stream: Path, root: Path, max_batch: int) -> float:
    init_workspace(root)
    landing = root / "landing" / "orders"
    landing.rmdir()
    landing.symlink_to(stream)
    with Workspace.open(root) as ws:
        began = time.perf_counter()
        ws.run("orders_daily", max_batch=max_batch)
        return time.perf_counter() - began


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    calls = 20_000 if args.quick else 200_000
    events, max_batch, rounds = (20_000, 2_000, 2) if args.quick else (200_000, 10_000, 3)
    r = c.Report("logs", "what logging costs the publish path", args.quick,
                 params={"calls": calls, "events": events, "max_batch": max_batch, "rounds": rounds})

    devnull = open(os.devnull, "w")
    real_stderr = sys.stderr
    sys.stderr = devnull
    try:
        logs.configure("text")  # the CLI default: info and debug off
        off = _per_batch(calls)
        empty = _empty(calls)
        logs.configure("json", verbose=1)
        on = _per_batch(calls // 10)

        with c.scratch(args, "logs") as work:
            stream = work / "stream"
            generate_stream(stream, events=events, partitions=2, days=60, seed=5, segment_size=max_batch)
            times: dict[str, list[float]] = {"off": [], "json": []}
            for i in range(rounds):
                for mode in ("off", "json"):
                    logs.configure("text") if mode == "off" else logs.configure("json", verbose=1)
                    times[mode].append(_run_once(stream, work / f"{mode}-{i}", max_batch))
    finally:
        sys.stderr = real_stderr
        devnull.close()
        logs.configure("text")
    r.section("the log helpers of one batch (batch_started, projected, batch_done)")
    r.figure("per_batch_off_us", off * 1e6, "logs off (the CLI's default level)", "us")
    r.figure("per_batch_empty_calls_us", empty * 1e6, "three empty Python calls", "us")
    r.figure("per_batch_json_us", on * 1e6, "JSON at debug into /dev/null", "us")
    r.section(f"Workspace.run of {events:,} events in {events // max_batch} batches (best of {rounds})")
    r.figures.update({"run_events": events, "run_batches": events // max_batch})
    r.figure("run_off_s", min(times["off"]), "logs off", "s")
    r.figure("run_json_s", min(times["json"]), "JSON logs at debug into /dev/null", "s")
    r.ratio("run_ratio", min(times["json"]), min(times["off"]), "JSON logs / logs off")
    r.emit(args)


if __name__ == "__main__":
    main()
