"""The output of ``lakepub run --follow`` (``publish/follow.py``): a line per published batch as
it commits, then one line when a signal stopped the loop (``--format json``: one JSON object per
cycle that published, and one when it stops)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from lakepub import output
from lakepub.errors import UserError
from lakepub.maintenance.durations import parse_duration
from lakepub.publish.follow import StopFlag, follow


def run_follow(ws: Any, dataset: str, *, landing: Path | None, max_batch: int, interval: str, fmt: str) -> None:
    seconds = parse_duration(interval, "--interval")
    if seconds < 1:
        raise UserError(f"invalid duration {interval!r} for --interval: at least 1s")
    ws.dataset(dataset)  # an unknown dataset fails before the loop starts
    last = time.perf_counter()

    def on_batch(result: Any, _pending: int) -> None:
        nonlocal last
        if fmt == "json":
            return
        now = time.perf_counter()
        c = result.counts
        click.echo(f"snapshot {result.snapshot_id} batch {result.batch_id[:12]}: {c.events} events, "
                   f"{c.entities_changed} entities changed, {c.duplicates} duplicates, "
                   f"end {output.vector(result.end)}, {now - last:.2f} s")
        sys.stdout.flush()
        last = now

    skipped: str | None = None

    def on_cycle(result: Any) -> None:
        nonlocal last, skipped
        last = time.perf_counter()
        # A retired dataset is skipped every cycle: said once (and again after a restore and a
        # new retirement), not never, or a follower would sit silent with nothing published.
        changed = result.skipped != skipped
        skipped = result.skipped
        if fmt == "json" and (result.batches or (changed and skipped)):
            click.echo(output.to_json(result.as_dict()).replace("\n", " "))
            sys.stdout.flush()
        elif fmt != "json" and changed and skipped:
            click.echo(f"skipped: {skipped}; still following")
            sys.stdout.flush()

    if fmt != "json":
        click.echo(f"following {dataset}: publishing new records every {interval.strip()} (SIGTERM or Ctrl-C stops "
                   "between batches)")
        sys.stdout.flush()
    with StopFlag() as stop:
        result = follow(ws, dataset, interval=seconds, stop=stop, landing=landing, max_batch=max_batch,
                        on_batch=on_batch, on_cycle=on_cycle)
    if fmt == "json":
        click.echo(output.to_json({"stopped": result.as_dict()}).replace("\n", " "))
        return
    click.echo(f"stopped by {result.stopped_by}: published {result.batches} batch(es), {result.events} events in "
               f"{result.cycles} cycle(s); {dataset} at {output.vector(result.end) if result.end else 'its committed position'}")
