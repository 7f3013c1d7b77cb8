"""The version 2 partition checksum (``projection/checksum.py``): a multiset hash updated per publish.

Properties: the update from the removed and added rows equals a full recomputation (random
tables and changes; and through real publishes in both write modes, recorded checksums compared
with the rows DuckDB reads back); it does not depend on row order and changes with any value or
multiplicity; ``verify`` catches a corrupted row in a data file; a table whose checksums were
recorded as version 1 (the code before version 2) keeps verifying and continues in version 2.
"""

from __future__ import annotations

import random
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakepub.projection.checksum import (checksum_of, format_v2, is_empty, is_v2, multiset_checksum, multiset_sum,
                                         partition_checksum, updated)
from lakepub.store.record import recorded_checksums
from lakepub.workspace import Workspace
from test_merge_on_read import Stream, _dataset, _workspace

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("d", pa.date32()), ("x", pa.float64()),
                    ("m", pa.decimal128(9, 2)), ("b", pa.bool_())])
_row = st.tuples(st.integers(-3, 3), st.one_of(st.none(), st.sampled_from(["", "a", "a|b", 'q"', "null", "é"])),
                 st.one_of(st.none(), st.dates(date(2024, 1, 1), date(2024, 1, 5))),
                 st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.1, 1e20, float("nan")])),
                 st.one_of(st.none(), st.sampled_from([Decimal("1.50"), Decimal("-2.00")])), st.booleans())


def _table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_row, max_size=30), st.data())
def test_the_update_equals_a_full_recomputation_and_ignores_order(rows, data):
    table = _table(rows)
    removed = sorted(data.draw(st.sets(st.integers(0, max(len(rows) - 1, 0)), max_size=len(rows))) if rows else [])
    added = data.draw(st.lists(_row, max_size=10))
    kept = [r for i, r in enumerate(rows) if i not in set(removed)]
    total = updated(multiset_sum(table), _table([rows[i] for i in removed]), _table(added))
    assert format_v2(total) == multiset_checksum(_table(kept + added))
    shuffled = list(rows)
    random.Random(len(rows)).shuffle(shuffled)
    assert multiset_checksum(_table(shuffled)) == multiset_checksum(table)


def test_any_changed_value_or_multiplicity_changes_it():
    rows = [(1, "a", date(2024, 1, 1), 0.1, Decimal("1.50"), True), (2, None, None, None, None, False)]
    base = multiset_checksum(_table(rows))
    assert is_v2(base) and len(base) == 3 + 32
    for i in range(len(SCHEMA)):
        for other in ((9, "b", date(2024, 1, 2), -0.0, Decimal("-2.00"), False),):
            changed = list(rows[0])
            changed[i] = other[i]
            assert multiset_checksum(_table([tuple(changed), rows[1]])) != base, SCHEMA.names[i]
    assert multiset_checksum(_table(rows + rows[:1])) != base  # a duplicated row counts
    assert multiset_checksum(_table([(1, "a|b", None, None, None, True)])) != \
        multiset_checksum(_table([(1, "a", None, None, None, True)]))
    # versions: a record is compared with the checksum of its own version; emptiness of both
    assert checksum_of(base, _table(rows)) == base
    v1 = partition_checksum(_table(rows))[:16]
    assert checksum_of(v1, _table(rows)).startswith(v1)
    empty_v1 = partition_checksum(SCHEMA.empty_table())
    assert is_empty(format_v2(0), empty_v1) and is_empty(empty_v1[:16], empty_v1)
    assert not is_empty(base, empty_v1) and not is_empty(v1, empty_v1)


def _read_back(ws: Workspace, name: str) -> dict[str, str]:
    """Per partition label, the version 2 checksum of the rows DuckDB reads (deletes applied)."""
    spec = ws.config.dataset(name)
    schema = spec.kind.output_schema()
    rows = ws.query(f'SELECT * FROM "{name}"').select(schema.names).cast(schema)
    from lakepub.publish.published_state import split

    return {spec.partition.label(v): multiset_checksum(t) for v, t in split(rows, spec.partition).items()}


def _table_of(ws: Workspace, name: str):
    return ws.catalog.load_table((ws.config.namespace, name))


def test_publishes_in_both_write_modes_record_what_a_full_recomputation_gives(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", _dataset("cow", None), _dataset("mor", "merge-on-read"))
    stream = Stream(7)
    for size in (30, 15, 25, 20):
        stream.publish(ws, "mor", stream.batch(size))
        for name in ("cow", "mor"):
            recorded = recorded_checksums(_table_of(ws, name))
            live = _read_back(ws, name)
            assert all(is_v2(c) for c in recorded.values())
            for label, checksum in recorded.items():  # an emptied partition records the empty sum
                assert live.get(label, format_v2(0)) == checksum, (name, label)
            assert set(live) <= set(recorded)
    ws = Workspace.open(ws.config.root)  # a new process: the sums start from the rows read back
    stream.publish(ws, "mor", stream.batch(20))
    for name in ("cow", "mor"):
        recorded = recorded_checksums(_table_of(ws, name))
        assert all(recorded[label] == c for label, c in _read_back(ws, name).items())
        assert ws.verify(name, deep=True).ok


def test_verify_catches_a_corrupted_row(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", _dataset("mor", "merge-on-read"))
    stream = Stream(3)
    for size in (30, 20):
        stream.publish(ws, "mor", stream.batch(size))
    assert ws.verify("mor").ok
    table = _table_of(ws, "mor")  # another tool rewrites the table with one value changed
    data = table.scan().to_arrow()
    plans = data.column("plan").to_pylist()
    plans[-1] = "corrupted"
    table.overwrite(data.set_column(data.schema.get_field_index("plan"), data.schema.field("plan"),
                                    pa.array(plans, data.schema.field("plan").type)))
    assert "corrupted" in ws.query('SELECT plan FROM "mor"').column("plan").to_pylist()
    report = ws.verify("mor")
    assert not report.ok and any("checksum" in m for m in report.mismatches), report.mismatches


def test_version_1_records_keep_verifying_and_the_next_publish_records_version_2(tmp_path: Path, monkeypatch):
    import lakepub.publish.datasets as datasets

    class NotCurrent:  # the code before version 2: every dataset recorded ``partition_checksum``'s prefix
        pass

    monkeypatch.setattr(datasets, "Current", NotCurrent)
    ws = _workspace(tmp_path / "ws", _dataset("cow", None), _dataset("mor", "merge-on-read"))
    stream = Stream(5)
    for size in (30, 20):
        stream.publish(ws, "mor", stream.batch(size))
    for name in ("cow", "mor"):
        old = recorded_checksums(_table_of(ws, name))
        assert old and not any(is_v2(c) for c in old.values())
    monkeypatch.undo()
    ws = Workspace.open(ws.config.root)
    for name in ("cow", "mor"):
        assert ws.verify(name, deep=True).ok
    stream.publish(ws, "mor", stream.batch(3))  # touches at most 3 of the 4 buckets
    for name in ("cow", "mor"):
        recorded = recorded_checksums(_table_of(ws, name))
        versions = {is_v2(c) for c in recorded.values()}
        assert True in versions, name
        report = ws.verify(name, deep=True)
        assert report.ok, report.mismatches
        assert all(recorded[label] == c for label, c in _read_back(ws, name).items() if is_v2(recorded[label]))
