"""Property test: random streams split into random batches equal a simple oracle."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import set_commit_mode
from lakepub.generate import oracle_summary
from lakepub.init import init_workspace
from lakepub.workspace import Workspace

ORDERS = ["A", "B", "C", "D", "E"]
DAYS = ["2025-01-30", "2025-01-31", "2025-02-01", "2025-03-15"]


def _payload(order: str, version: int, salt: int) -> dict:
    """A deterministic payload per (order, version): the same version never has two payloads."""
    h = hash((order, version, salt)) & 0xFFFF
    deleted = h % 5 == 0
    return {
        "order_id": order,
        "version": version,
        "day": None if deleted and h % 2 else DAYS[h % len(DAYS)],
        "cents": None if deleted and h % 2 else h % 1000,
        "deleted": deleted,
    }


events_strategy = st.lists(
    st.tuples(st.sampled_from(ORDERS), st.integers(min_value=1, max_value=4)), min_size=1, max_size=25
)


@pytest.mark.parametrize("mode", ["atomic", "ordered"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=events_strategy, cuts=st.lists(st.integers(min_value=0, max_value=25), max_size=4),
       salt=st.integers(min_value=0, max_value=3))
def test_published_table_equals_oracle(mode, pairs, cuts, salt):
    events = [_payload(o, v, salt) for o, v in pairs]
    bounds = sorted({0, len(events), *[c for c in cuts if c < len(events)]})
    with tempfile.TemporaryDirectory() as tmp:
        init_workspace(Path(tmp))
        set_commit_mode(Path(tmp), mode)
        ws = Workspace.open(tmp)
        for lo, hi in zip(bounds, bounds[1:]):
            ws.publish("orders_daily", events[lo:hi], start={"p0": lo}, end={"p0": hi})
        got = {r["day"]: (r["cents"], r["orders"]) for r in ws.query("SELECT * FROM orders_daily").to_pylist()}
        assert got == oracle_summary(events)
        # Replaying the whole stream once more as a new range changes nothing.
        ws.publish("orders_daily", events, start={"p0": len(events)}, end={"p0": 2 * len(events)})
        again = {r["day"]: (r["cents"], r["orders"]) for r in ws.query("SELECT * FROM orders_daily").to_pylist()}
        assert again == got
