"""``lakepub diff``: what changed in a published table between two of its snapshots.

Both snapshots are read with DuckDB (``iceberg_scan(..., snapshot_from_id=...)``), so the diff
is what any Iceberg reader sees at each. Rows are matched on the dataset's *group*: the
``group_by`` columns of an aggregate, the key of a current-state table (null group values match
each other, as in GROUP BY). A group is added (only in B), removed (only in A) or changed (its
values differ); an aggregate's measure deltas are B - A (a missing group counts as 0), a
current-state row's changed columns are listed with both values. Partitions are labelled with
the table's own transform (``PartitionBy``): a partition is added, removed or changed when one
of its groups is, with its row counts and, for aggregates, its measure totals' deltas. A
current-state row whose partition column changed is listed with both partitions.

A snapshot is named by its id, by a prefix of its publish's batch id (as ``lakepub log``
shows it), or ``current``. Cost: both snapshots are read whole (one row per group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakepub.errors import UserError
from lakepub.lineage import sources


@dataclass(frozen=True)
class Diff:
    dataset: str
    a: dict[str, Any]
    b: dict[str, Any]
    group_by: list[str]
    measures: list[str]
    partitions: list[dict[str, Any]]
    groups: list[dict[str, Any]]

    def summary(self) -> dict[str, int]:
        out = {"groups_added": 0, "groups_removed": 0, "groups_changed": 0,
               "partitions_added": 0, "partitions_removed": 0, "partitions_changed": 0}
        for g in self.groups:
            out[f"groups_{g['status']}"] += 1
        for p in self.partitions:
            out[f"partitions_{p['status']}"] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "a": self.a, "b": self.b, "group_by": self.group_by,
                "measures": self.measures, "summary": self.summary(), "partitions": self.partitions,
                "groups": self.groups}


def resolve_snapshot(table, text: str, where: str) -> int:
    """A snapshot id of ``table`` from an id, a batch id prefix (>= 6 characters) or ``current``."""
    if text == "current":
        if table.metadata.current_snapshot_id is None:
            raise UserError(f"{where}: the table has no current snapshot")
        return table.metadata.current_snapshot_id
    if text.lstrip("-").isdigit() and len(text) <= 20 and table.snapshot_by_id(int(text)) is not None:  # int64
        return int(text)
    if len(text) >= 6:
        found = [p for p in sources.publishes(table) if p.batch_id.startswith(text.lower())]
        if len(found) == 1:
            return found[0].snapshot_id
        if len(found) > 1:
            raise UserError(f"{where}: batch id prefix {text!r} names {len(found)} publishes; give more characters")
    raise UserError(f"{where}: {text!r} is neither a snapshot id of the table nor the batch id (prefix) of a "
                    "retained publish (see 'lakepub log'), nor 'current'")


def _describe(table, snapshot_id: int) -> dict[str, Any]:
    snapshot = table.snapshot_by_id(snapshot_id)
    from lakepub.store.record import snapshot_record

    record = snapshot_record(snapshot)
    return {"snapshot_id": snapshot_id, "committed_at": sources.iso(snapshot.timestamp_ms),
            "batch_id": record.batch_id if record else None,
            "kind": str(record.batch.get("kind", "publish")) if record else "other tool",
            "positions": record.positions if record else None}


def diff(ws, dataset: str, a: str, b: str) -> Diff:
    """The differences between snapshots ``a`` and ``b`` of ``dataset``'s published table."""

    from lakepub import duck
    from lakepub.publish.evolution import as_schema
    from lakepub.store.integrity import check_scannable

    spec = ws.dataset(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001 - the workspace's own lookup
    if table is None or table.metadata.current_snapshot_id is None:
        raise UserError(f"'{dataset}' has nothing published yet; run 'lakepub run {dataset}' first")
    ids = resolve_snapshot(table, a, "SNAPSHOT_A"), resolve_snapshot(table, b, "SNAPSHOT_B")
    kind = spec.kind
    schema = kind.output_schema()
    if kind.name == "aggregate":
        group_by, measures = list(kind.group_by), [m.name for m in kind.measures]
        numeric = True
    else:
        group_by = [n for n in schema.names if n in spec.contract.entity.key]
        measures, numeric = [n for n in schema.names if n not in group_by], False
    partition = kind.partition
    con = duck.connect(ws.config.catalog)
    try:
        for side, snapshot_id in zip("ab", ids):
            check_scannable(table, snapshot_id)
            rows = con.execute(f"SELECT * FROM {duck.scan_sql(table.metadata_location, snapshot_id)}").to_arrow_table()
            rows = as_schema(rows, schema) if rows.num_rows else schema.empty_table()  # also from before an evolution
            con.register(f"lp_diff_{side}", rows.append_column("_partition", sources.partition_labels(partition, rows)))
        q = duck.name
        on = " AND ".join(f"a.{q(c)} IS NOT DISTINCT FROM b.{q(c)}" for c in group_by) or "true"
        differ = " OR ".join(f"a.{q(m)} IS DISTINCT FROM b.{q(m)}" for m in measures) or "false"
        cols = ", ".join([*(f"coalesce(a.{q(c)}, b.{q(c)}) AS {q(c)}" for c in group_by),
                          "a._partition AS _pa", "b._partition AS _pb", "a._partition IS NOT NULL AS _in_a",
                          "b._partition IS NOT NULL AS _in_b",
                          *(f"a.{q(m)} AS {q('a_' + m)}" for m in measures),
                          *(f"b.{q(m)} AS {q('b_' + m)}" for m in measures)])
        changed = con.execute(f"""
            SELECT {cols} FROM lp_diff_a a FULL OUTER JOIN lp_diff_b b ON {on}
            WHERE a._partition IS NULL OR b._partition IS NULL OR {differ} OR a._partition <> b._partition
            ORDER BY ALL""").fetchall()
        sums = "".join(f", sum({q(m)})" for m in measures) if numeric else ""
        per_partition = {}
        for side in "ab":
            for label, n, *totals in con.execute(
                    f"SELECT _partition, count(*){sums} FROM lp_diff_{side} GROUP BY ALL").fetchall():
                per_partition.setdefault(label, {"a": (0, {}), "b": (0, {})})[side] = (n, dict(zip(measures, totals)))
    finally:
        for side in "ab":
            try:
                con.unregister(f"lp_diff_{side}")
            except Exception:  # noqa: BLE001 - not registered (the read failed first)
                pass
        con.close()
    groups, touched = [], set()
    k, m = len(group_by), len(measures)
    for row in changed:
        key, (pa_, pb, in_a, in_b), va, vb = row[:k], row[k:k + 4], row[k + 4:k + 4 + m], row[k + 4 + m:]
        status = "added" if not in_a else "removed" if not in_b else "changed"
        entry: dict[str, Any] = {"partition": pb if in_b else pa_, "group": dict(zip(group_by, key)),
                                 "status": status}
        if in_a and in_b and pa_ != pb:
            entry["old_partition"] = pa_
        entry["a"] = dict(zip(measures, va)) if in_a else None
        entry["b"] = dict(zip(measures, vb)) if in_b else None
        if numeric:
            entry["delta"] = {n: (y or 0) - (x or 0) for n, x, y in zip(measures, va, vb)}
        else:
            entry["changed"] = [n for n, x, y in zip(measures, va, vb) if in_a and in_b and x != y]
        groups.append(entry)
        touched.update(p for p in (pa_, pb) if p is not None)
    partitions = []
    for label in sorted(touched):
        (na, ta), (nb, tb) = per_partition.get(label, {"a": (0, {}), "b": (0, {})}).values()
        status = "added" if na == 0 else "removed" if nb == 0 else "changed"
        entry = {"partition": label, "status": status, "rows_a": na, "rows_b": nb}
        if numeric:
            entry["delta"] = {n: (tb.get(n) or 0) - (ta.get(n) or 0) for n in measures}
        partitions.append(entry)
    return Diff(dataset, _describe(table, ids[0]), _describe(table, ids[1]), group_by, measures, partitions, groups)
