"""Versioned projection of a batch against the ledger.

Given a validated batch of full-state events and the ledger (every distinct (order_id, version)
accepted so far), compute:

* conflicts: the same (order_id, version) with a different payload, inside the batch or against
  the ledger; the first one (by order_id, version) blocks the publish;
* the new ledger rows: distinct (order_id, version) not seen before (duplicates are ignored, and
  so are versions at or below an order's durable floor, left by ledger compaction);
* per affected order, the state before (its highest ledger version) and after (the highest of
  before and the new versions). Only a higher version changes the state, so the result does not
  depend on the order of events, and a tombstone can never be resurrected by an older version;
* per-day deltas: retract the before state from its day, add the after state to its day. They
  are exact Python ints even where an int64 sum would wrap (a batch of huge cents values); the
  publisher refuses a day whose total would leave int64 (``rewrite.check_totals``).

The batch arrives sorted by (order_id, version, ...) (``identity.canonical``, the order its digest
is computed in), so every step on the batch side is a vectorised comparison of neighbouring rows
in numpy: no hashing of the batch's string keys. Only the ledger rows of the batch's orders are
used; ``publish/lookup.py`` finds them (by the ledger's key index, else by a DuckDB join), so
this module reads no table and its work is proportional to the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakepub.errors import PayloadConflict
from lakepub.keys import ORDER_KEYS_VERSION, order_keys
from lakepub.store.record import Counts

_PAYLOAD = ["order_id", "version", "day", "cents", "deleted"]
_EPOCH = date(1970, 1, 1)
_NO_FLOOR = np.iinfo(np.int64).min
_INT64_MAX = int(np.iinfo(np.int64).max)


@dataclass(frozen=True)
class Projection:
    new_ledger_rows: pa.Table  # order_id, version, day, cents, deleted, k1, k2 (sorted by order_id, version)
    deltas: dict[date, tuple[int, int]]  # day -> (cents delta, orders delta), zero deltas dropped
    counts: Counts


@dataclass(frozen=True)
class _Rows:
    """Columns of rows sorted by (order_id, version) as numpy arrays; nulls explicit."""

    table: pa.Table
    version: np.ndarray
    day: np.ndarray  # int32 days since epoch, 0 where null
    day_valid: np.ndarray
    cents: np.ndarray  # int64, 0 where null
    cents_valid: np.ndarray
    deleted: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> "_Rows":
        day = pc.cast(table.column("day"), pa.int32())
        return cls(
            table=table,
            version=_ints(table.column("version")),
            day=_ints(day).astype(np.int32),
            day_valid=_valid(day),
            cents=_ints(table.column("cents")),
            cents_valid=_valid(table.column("cents")),
            deleted=table.column("deleted").to_numpy(zero_copy_only=False).astype(bool),
        )

    def same_payload(self, i: np.ndarray, other: "_Rows", j: np.ndarray) -> np.ndarray:
        """Row-wise ``self[i] == other[j]`` on (day, cents, deleted), null equal to null."""
        return ((self.day_valid[i] == other.day_valid[j]) & (self.day[i] == other.day[j])
                & (self.cents_valid[i] == other.cents_valid[j]) & (self.cents[i] == other.cents[j])
                & (self.deleted[i] == other.deleted[j]))


@dataclass(frozen=True)
class BatchSide:
    """What the projection needs of the batch alone (``prepare_batch``): no table is read, so
    ``Workspace.run`` computes it for the next batch in its read-ahead thread."""

    n_events: int
    distinct: _Rows  # one row per distinct (order_id, version), sorted
    d_order: np.ndarray  # the order number (position in ``orders``) of each distinct row
    orders: pa.Array  # the batch's distinct order ids, sorted
    keys: tuple[np.ndarray, np.ndarray]  # their order keys (lakepub.keys, ORDER_KEYS_VERSION)
    conflict: tuple[str, int] | None  # a key with two payloads in the batch (blocks the publish)
    _other_keys: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    def keys_for(self, version: str | None) -> tuple[np.ndarray, np.ndarray]:
        """The orders' keys by the ledger's key function (``None``: a ledger without keys, whose
        rows drop them); computed once per other version (a ledger created before v2)."""
        if version is None or version == ORDER_KEYS_VERSION:
            return self.keys
        if version not in self._other_keys:
            self._other_keys[version] = order_keys(self.orders, version)
        return self._other_keys[version]


def prepare_batch(batch: pa.Table) -> BatchSide:
    """``batch`` must be sorted by (order_id, version) (``identity.canonical`` does it)."""
    n_events = batch.num_rows
    rows = _Rows.of(batch.select(_PAYLOAD).combine_chunks())
    oid = rows.table.column("order_id")
    same_order = np.zeros(n_events, dtype=bool)
    if n_events > 1:
        same_order[1:] = pc.equal(oid.slice(1), oid.slice(0, n_events - 1)).to_numpy(zero_copy_only=False)
    same_key = same_order.copy()
    same_key[1:] &= rows.version[1:] == rows.version[:-1]

    # Duplicates within the batch; two payloads for one key are neighbours after the sort.
    later = np.flatnonzero(same_key)
    differs = later[~rows.same_payload(later, rows, later - 1)]
    conflict = (oid[int(differs[0])].as_py(), int(rows.version[int(differs[0])])) if differs.size else None

    first = np.flatnonzero(~same_key)  # one row per distinct (order_id, version)
    distinct = _take(rows, first)
    d_order = np.cumsum(~same_order[first]) - 1
    orders = distinct.table.column("order_id").take(pa.array(np.flatnonzero(~same_order[first])))
    return BatchSide(n_events, distinct, d_order, orders, order_keys(orders), conflict)


def project(side: BatchSide, found: tuple[pa.Table, np.ndarray], key_version: str | None = None) -> Projection:
    """Project a batch (its ``prepare_batch`` result) onto the ledger rows of its orders:
    ``found`` is what ``publish/lookup.py`` returns, the rows (version, day, cents, deleted,
    floor) and, per row, the position of its order in ``side.orders``. The new ledger rows get
    the keys of the ledger's ``key_version`` (``layout.order_keys_version``).
    """
    if side.conflict is not None:
        raise PayloadConflict(side.conflict[0], side.conflict[1], "two payloads in this batch")
    n_events, distinct, d_order, orders = side.n_events, side.distinct, side.d_order, side.orders
    k1, k2 = side.keys_for(key_version)
    prev, p_order = _Rows.of(found[0].combine_chunks()), found[1]
    n_orders = len(orders)

    # Ledger rows with the same (order_id, version) as a batch row: seen before, same payload or conflict.
    seen = np.zeros(len(d_order), dtype=bool)
    if prev.table.num_rows:
        d_pos, p_pos = _match(d_order, distinct.version, p_order, prev.version)
        bad = ~distinct.same_payload(d_pos, prev, p_pos)
        if bad.any():
            i = int(d_pos[np.flatnonzero(bad)[0]])
            raise PayloadConflict(distinct.table.column("order_id")[i].as_py(), int(distinct.version[i]),
                                  "already published with another payload")
        seen[d_pos] = True

    # Per order: the state before (its highest ledger version) and its compaction floor.
    before_row = np.full(n_orders, -1, dtype=np.int64)
    floor = np.full(n_orders, _NO_FLOOR, dtype=np.int64)
    if prev.table.num_rows:
        by_version = np.lexsort((prev.version, p_order))
        grouped = p_order[by_version]
        highest = by_version[np.append(grouped[1:] != grouped[:-1], True)]  # the last row of each order
        before_row[p_order[highest]] = highest
        prev_floor = prev.table.column("floor")
        floors = np.where(_valid(prev_floor), _ints(prev_floor), _NO_FLOOR)
        np.maximum.at(floor, p_order, floors)
    before_version = np.full(n_orders, _NO_FLOOR, dtype=np.int64)
    has_before = before_row >= 0
    before_version[has_before] = prev.version[before_row[has_before]]

    # New versions: unseen and above the floor (versions at or below it were seen before compaction).
    unseen = ~seen
    new = unseen & (distinct.version > floor[d_order])
    new_idx = np.flatnonzero(new)
    new_order = d_order[new_idx]
    stale = int(np.count_nonzero(distinct.version[new_idx] < before_version[new_order]))

    # Per order, its highest new version (the last new row of the order) changes it if above before.
    last_new = new_idx[np.append(new_order[1:] != new_order[:-1], True)] if new_idx.size else new_idx
    changed_rows = last_new[distinct.version[last_new] > before_version[d_order[last_new]]]
    changed_orders = d_order[changed_rows]
    deltas = _deltas(distinct, changed_rows, prev, before_row[changed_orders])

    new_versions, n_unseen, changed = int(new_idx.size), int(np.count_nonzero(unseen)), int(changed_rows.size)
    counts = Counts(
        events=n_events,
        new_versions=new_versions,
        duplicates=n_events - n_unseen,
        stale=stale + (n_unseen - new_versions),
        superseded=new_versions - changed - stale,
        deletes=int(np.count_nonzero(distinct.deleted[changed_rows])),
        orders_changed=changed,
    )
    new_rows = distinct.table.take(pa.array(new_idx))
    new_rows = new_rows.append_column("k1", pa.array(k1[new_order])).append_column("k2", pa.array(k2[new_order]))
    return Projection(new_ledger_rows=new_rows, deltas=deltas, counts=counts)


def _match(a_group: np.ndarray, a_version: np.ndarray, b_group: np.ndarray, b_version: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Positions (i, j) with a[i] == b[j] on (group, version), in key order; ``a`` is unique on the key."""
    _, ranks = np.unique(np.concatenate([a_version, b_version]), return_inverse=True)
    ranks = ranks.astype(np.int64)
    a_key = (a_group.astype(np.int64) << 32) | ranks[: len(a_version)]
    b_key = (b_group.astype(np.int64) << 32) | ranks[len(a_version):]
    _, i, j = np.intersect1d(a_key, b_key, return_indices=True)
    return i, j


def _deltas(after: _Rows, after_rows: np.ndarray, before: _Rows, before_rows: np.ndarray
            ) -> dict[date, tuple[int, int]]:
    """Per-day (cents, orders) deltas: retract each before state, add each after state."""
    retract = before_rows[before_rows >= 0]
    retract = retract[~before.deleted[retract]]
    add = after_rows[~after.deleted[after_rows]]
    days = np.concatenate([before.day[retract], after.day[add]])
    cents = np.concatenate([-before.cents[retract], after.cents[add]])
    n = np.concatenate([np.full(len(retract), -1, dtype=np.int64), np.ones(len(add), dtype=np.int64)])
    if not days.size:
        return {}
    uniq, inverse = np.unique(days, return_inverse=True)
    sum_cents = np.zeros(len(uniq), dtype=np.int64)
    sum_n = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(sum_cents, inverse, cents)
    np.add.at(sum_n, inverse, n)
    exact: list[int] = sum_cents.tolist()
    # int64 sums wrap silently. No sum of these values can leave int64 when the largest magnitude
    # times their count fits (one max over the batch); else the sums are redone exactly from
    # 32-bit halves, each summed without overflow in int64, and recombined as Python ints.
    if len(cents) * int(np.abs(cents).max()) > _INT64_MAX:
        high, low = np.zeros(len(uniq), dtype=np.int64), np.zeros(len(uniq), dtype=np.int64)
        np.add.at(high, inverse, cents >> 32)
        np.add.at(low, inverse, cents & 0xFFFFFFFF)
        exact = [(h << 32) + lo for h, lo in zip(high.tolist(), low.tolist())]
    return {_EPOCH + timedelta(days=int(d)): (c, int(o))
            for d, c, o in zip(uniq, exact, sum_n) if c != 0 or o != 0}


def _take(rows: _Rows, idx: np.ndarray) -> _Rows:
    return _Rows(table=rows.table.take(pa.array(idx)), version=rows.version[idx], day=rows.day[idx],
                 day_valid=rows.day_valid[idx], cents=rows.cents[idx], cents_valid=rows.cents_valid[idx],
                 deleted=rows.deleted[idx])


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(column, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _valid(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.is_valid(column).to_numpy(zero_copy_only=False)
