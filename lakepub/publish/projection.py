"""Versioned projection of a batch against the ledger, computed in DuckDB.

Given a validated batch of full-state events and the ledger (every distinct (order_id, version)
accepted so far), compute:

* conflicts: the same (order_id, version) with a different payload, inside the batch or against
  the ledger; the first one blocks the publish;
* the new ledger rows: distinct (order_id, version) not seen before (duplicates are ignored, and
  so are versions at or below an order's durable floor, left by ledger compaction);
* per affected order, the state before (its highest ledger version) and after (the highest of
  before and the new versions). Only a higher version changes the state, so the result does not
  depend on the order of events, and a tombstone can never be resurrected by an older version;
* per-day deltas: retract the before state from its day, add the after state to its day.

Only the ledger rows of the batch's orders are read (a semi-join that DuckDB can prune with the
files' min/max statistics); the work is proportional to the batch, not to history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import duckdb
import pyarrow as pa

from lakepub.errors import PayloadConflict
from lakepub.store.record import Counts

_PAYLOAD = "order_id, version, day, cents, deleted"


@dataclass(frozen=True)
class Projection:
    new_ledger_rows: pa.Table  # order_id, version, day, cents, deleted (sorted by order_id, version)
    deltas: dict[date, tuple[int, int]]  # day -> (cents delta, orders delta), zero deltas dropped
    counts: Counts


def project(con: duckdb.DuckDBPyConnection, events: pa.Table, ledger_sql: str | None) -> Projection:
    """Project ``events`` onto the ledger read by the SQL table expression ``ledger_sql``.

    ``ledger_sql`` is None when the ledger is still empty.
    """
    con.register("lp_events", events)
    try:
        return _project(con, events.num_rows, ledger_sql)
    finally:
        con.unregister("lp_events")
        for name in ("lp_batch", "lp_prev", "lp_unseen", "lp_new", "lp_before", "lp_changed"):
            con.execute(f"DROP TABLE IF EXISTS {name}")


def _project(con: duckdb.DuckDBPyConnection, n_events: int, ledger_sql: str | None) -> Projection:
    con.execute(f"CREATE OR REPLACE TEMP TABLE lp_batch AS SELECT DISTINCT {_PAYLOAD} FROM lp_events")
    _raise_conflict(con, """
        SELECT order_id, version, count(*) FROM lp_batch GROUP BY order_id, version HAVING count(*) > 1
        ORDER BY order_id, version LIMIT 1""", "two payloads in this batch")

    if ledger_sql is None:
        con.execute(f"CREATE OR REPLACE TEMP TABLE lp_prev AS SELECT {_PAYLOAD}, NULL::BIGINT AS floor FROM lp_batch LIMIT 0")
    else:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE lp_prev AS
            SELECT {_PAYLOAD}, floor FROM {ledger_sql} AS l
            WHERE l.order_id IN (SELECT DISTINCT order_id FROM lp_batch)""")
    _raise_conflict(con, """
        SELECT b.order_id, b.version, 1 FROM lp_batch b JOIN lp_prev p USING (order_id, version)
        WHERE b.day IS DISTINCT FROM p.day OR b.cents IS DISTINCT FROM p.cents OR b.deleted <> p.deleted
        ORDER BY b.order_id, b.version LIMIT 1""", "already published with another payload")

    # Unseen versions at or below a compacted order's floor were seen before compaction: stale.
    con.execute("""
        CREATE OR REPLACE TEMP TABLE lp_unseen AS
        SELECT b.* FROM lp_batch b ANTI JOIN lp_prev p USING (order_id, version)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE lp_new AS
        SELECT u.* FROM lp_unseen u
        LEFT JOIN (SELECT order_id, max(floor) AS floor FROM lp_prev GROUP BY order_id) f USING (order_id)
        WHERE f.floor IS NULL OR u.version > f.floor""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE lp_before AS
        SELECT * EXCLUDE (floor) FROM lp_prev QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) = 1""")
    # An order changes when its highest new version is above its highest previous one.
    con.execute("""
        CREATE OR REPLACE TEMP TABLE lp_changed AS
        SELECT n.* FROM (
            SELECT * FROM lp_new QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) = 1
        ) n LEFT JOIN lp_before b USING (order_id)
        WHERE b.version IS NULL OR n.version > b.version""")
    deltas_rows = con.execute("""
        SELECT day, sum(dc)::BIGINT, sum(dn)::BIGINT FROM (
            SELECT b.day, -b.cents AS dc, -1 AS dn
            FROM lp_changed c JOIN lp_before b USING (order_id) WHERE NOT b.deleted
            UNION ALL
            SELECT day, cents, 1 FROM lp_changed WHERE NOT deleted
        ) GROUP BY day HAVING sum(dc) <> 0 OR sum(dn) <> 0 ORDER BY day""").fetchall()
    unseen, new_versions, stale, changed, deletes = con.execute("""
        SELECT (SELECT count(*) FROM lp_unseen), (SELECT count(*) FROM lp_new),
               (SELECT count(*) FROM lp_new n JOIN lp_before b USING (order_id) WHERE n.version < b.version),
               count(*), count(*) FILTER (WHERE deleted)
        FROM lp_changed""").fetchone()
    new_rows = con.execute(f"SELECT {_PAYLOAD} FROM lp_new ORDER BY order_id, version").to_arrow_table()
    counts = Counts(
        events=n_events,
        new_versions=new_versions,
        duplicates=n_events - unseen,
        stale=stale + (unseen - new_versions),
        superseded=new_versions - changed - stale,
        deletes=deletes,
        orders_changed=changed,
    )
    return Projection(new_ledger_rows=new_rows, deltas={d: (c, o) for d, c, o in deltas_rows}, counts=counts)


def _raise_conflict(con: duckdb.DuckDBPyConnection, sql: str, detail: str) -> None:
    row = con.execute(sql).fetchone()
    if row is not None:
        raise PayloadConflict(row[0], row[1], detail)
