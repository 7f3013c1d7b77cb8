"""A new process's publish reads its published rows in the background (``DatasetWriter.prefetch``)
while it looks up the ledger: the result must be the same as reading them in line, a warm
process must not read them again, and a failing read must fail the publish as it did."""

from __future__ import annotations

import pytest

from conftest import published_pointers
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.landing import LandingSource
from lakepub.publish import published_state
from lakepub.workspace import Workspace


def _batches(ws: Workspace, size: int) -> list:
    spec = ws.dataset("orders_daily")
    return list(LandingSource(ws.config.landing_dir(spec.source), spec.contract).batches({}, size))


def _published(root) -> dict:
    fresh = Workspace.open(root)
    return {r["day"]: (r["cents"], r["orders"]) for r in fresh.query("SELECT * FROM orders_daily").to_pylist()}


def test_each_new_process_prefetches_once_and_equals_the_oracle(ws: Workspace, monkeypatch):
    landing = ws.config.landing_dir("orders")
    generate_stream(landing, events=2400, partitions=1, days=60, seed=3, spread=True)
    batches = _batches(ws, 600)
    loads: list[int] = []
    real_load = published_state.load

    def counted(table, *args, **kwargs):
        loads.append(table.metadata.current_snapshot_id)
        return real_load(table, *args, **kwargs)

    monkeypatch.setattr(published_state, "load", counted)
    first = Workspace.open(ws.config.root)
    first.publish("orders_daily", batches[0][0], start=batches[0][1], end=batches[0][2])  # creates the table
    assert loads == []  # nothing published yet: nothing to read
    first.publish("orders_daily", batches[1][0], start=batches[1][1], end=batches[1][2])
    assert loads == []  # kept from its own publish: a warm process reads nothing
    for events, start, end in batches[2:]:  # each a new process (a new Workspace) reading the table once
        loads.clear()
        fresh = Workspace.open(ws.config.root)
        writer = fresh.publisher("orders_daily").writers["orders_daily"]
        fresh.publish("orders_daily", events, start=start, end=end)
        assert len(loads) == 1 and writer._loading is None  # read in the background, then taken
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))


def test_a_failing_background_read_fails_the_publish_and_publishes_nothing(ws: Workspace, monkeypatch):
    landing = ws.config.landing_dir("orders")
    generate_stream(landing, events=1200, partitions=1, days=30, seed=4, spread=True)
    batches = _batches(ws, 600)
    ws.publish("orders_daily", batches[0][0], start=batches[0][1], end=batches[0][2])
    before = published_pointers(ws)

    def broken(*args, **kwargs):
        raise OSError("injected: a published data file could not be read")

    monkeypatch.setattr(published_state, "load", broken)
    fresh = Workspace.open(ws.config.root)
    with pytest.raises(Exception, match="injected: a published data file"):
        fresh.publish("orders_daily", batches[1][0], start=batches[1][1], end=batches[1][2])
    assert published_pointers(ws) == before
    monkeypatch.undo()
    again = Workspace.open(ws.config.root)
    again.publish("orders_daily", batches[1][0], start=batches[1][1], end=batches[1][2])
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
