"""Batch identity and checksums: sha256 over canonical, length-prefixed fields.

A batch is identified by (dataset, source, start vector, end vector, sha256 of its canonical
events). The events digest does not depend on the order of the events in the input: events are
sorted on every field first, then each column is hashed from its Arrow buffers (vectorised, no
per-event Python work).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakepub import positions
from lakepub.positions import Vector

if TYPE_CHECKING:
    from lakepub.contract.model import Contract

_SORT_KEYS = [("order_id", "ascending"), ("version", "ascending"), ("deleted", "ascending"),
              ("day", "ascending"), ("cents", "ascending")]


def _field(h: "hashlib._Hash", payload: bytes | memoryview) -> None:
    h.update(len(payload).to_bytes(8, "little"))
    h.update(payload)


def fingerprint(*fields: str) -> str:
    """sha256 hex digest over length-prefixed UTF-8 fields."""
    h = hashlib.sha256()
    for value in fields:
        _field(h, value.encode("utf-8"))
    return h.hexdigest()


def canonical(events: pa.Table, contract: "Contract | None" = None) -> pa.Table:
    """The events sorted on every field, in one chunk: the key fields, the version, the deleted
    flag, then the other fields in declared order (the orders contract, also meant by no
    contract: order_id, version, deleted, day, cents).

    The digest is computed in this order, and the projection relies on it (neighbouring rows
    share an entity and a version), so a batch is sorted once for both.
    """
    keys = _SORT_KEYS if contract is None or contract.is_orders_v1 else _sort_keys(contract)
    return events.take(pc.sort_indices(events, sort_keys=keys)).combine_chunks()


def events_digest(events: pa.Table, contract: "Contract | None" = None, *, is_canonical: bool = False) -> str:
    """Order-independent sha256 of a validated events table (``contract.arrow_schema``; no
    contract means the orders contract).

    ``is_canonical``: the table is already ``canonical(events, contract)`` (saves sorting it again).
    The orders contract keeps the digest batches had before contracts (``lakepub-events-v1``), so
    a retried old batch keeps its identity; any other contract's digest (``lakepub-events-v2``)
    covers its declared schema (names and types) and, per field in declared order, the validity
    bytes of a nullable column and its values (nulls as zeros).
    """
    if contract is not None and not contract.is_orders_v1:
        return _digest_v2(events if is_canonical else canonical(events, contract), contract)
    h = hashlib.sha256(b"lakepub-events-v1")
    _field(h, str(events.num_rows).encode())
    if events.num_rows == 0:
        return h.hexdigest()
    t = events if is_canonical else canonical(events)
    oid = t.column("order_id").chunk(0)
    offsets = np.frombuffer(oid.buffers()[1], dtype=np.int32)[oid.offset: oid.offset + len(oid) + 1]
    _field(h, np.diff(offsets).astype("<i8").tobytes())
    _field(h, memoryview(oid.buffers()[2])[int(offsets[0]): int(offsets[-1])])
    _field(h, _int_bytes(t.column("version"), 0))
    day = pc.cast(t.column("day"), pa.int32())
    _field(h, _int_bytes(day, 0))
    _field(h, pc.is_valid(day).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
    _field(h, _int_bytes(t.column("cents"), -1))
    _field(h, t.column("deleted").to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
    return h.hexdigest()


def _sort_keys(contract: "Contract") -> list[tuple[str, str]]:
    entity = contract.entity
    first = [*entity.key, entity.version, *([entity.deleted] if entity.deleted else [])]
    rest = [f.name for f in contract.fields if f.name not in first]
    return [(name, "ascending") for name in (*first, *rest)]


# Fixed-width Arrow storage of each declared type, hashed as little-endian bytes of this width.
_WIDTH = {"int": 4, "long": 8, "float": 4, "double": 8, "date": 4, "timestamp": 8, "decimal": 16}


def _digest_v2(t: pa.Table, contract: "Contract") -> str:
    h = hashlib.sha256(b"lakepub-events-v2")
    _field(h, "|".join(f"{f.name}:{f.type}" for f in contract.fields).encode())
    _field(h, str(t.num_rows).encode())
    if t.num_rows == 0:
        return h.hexdigest()
    nullable = {f.name for f in contract.arrow_schema if f.nullable}
    for spec in contract.fields:
        col = t.column(spec.name)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if spec.name in nullable:  # explicit: a null is never confused with the zero it is filled with
            _field(h, pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
        kind = spec.type.kind
        if kind == "string":
            col = pc.fill_null(col, "")
            offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset: col.offset + len(col) + 1]
            _field(h, np.diff(offsets).astype("<i8").tobytes())
            _field(h, memoryview(col.buffers()[2])[int(offsets[0]): int(offsets[-1])] if col.buffers()[2] else b"")
        elif kind == "boolean":
            _field(h, pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
        else:
            width = _WIDTH[kind]
            if kind in ("date", "timestamp"):
                col = col.view(pa.int32() if kind == "date" else pa.int64())
            zero = pa.scalar(Decimal(0), col.type) if kind == "decimal" else pa.scalar(0).cast(col.type)
            filled = pc.fill_null(col, zero)  # a null slot's bytes are undefined
            data = filled.buffers()[1]  # Arrow buffers are native-endian: little-endian where lakepub runs
            _field(h, memoryview(data)[filled.offset * width: (filled.offset + len(filled)) * width])
    return h.hexdigest()


def _int_bytes(column: pa.ChunkedArray | pa.Array, null_value: int) -> bytes:
    filled = pc.fill_null(column, null_value)
    return np.ascontiguousarray(filled.to_numpy()).astype("<i8").tobytes()


RECORDED_CHECKSUM_HEX = 16  # a publish records the first 64 bits of each partition's checksum


def partition_checksum(rows: Iterable[tuple[date, int, int]]) -> str:
    """Checksum of one published partition: sha256 hex of its (day, cents, orders) rows sorted by day.

    Publishes record its first ``RECORDED_CHECKSUM_HEX`` characters (enough to detect any
    accidental change; the snapshot summary of every retained snapshot carries one per rewritten
    partition, and readers parse them all with the table metadata); ``checksum_matches``
    accepts such a prefix as well as the full digest recorded by earlier versions.
    """
    h = hashlib.sha256(b"lakepub-partition-v1")
    for day, cents, orders in sorted(rows):
        _field(h, f"{day.isoformat()}|{cents}|{orders}".encode())
    return h.hexdigest()


def recorded_checksum(rows: Iterable[tuple[date, int, int]]) -> str:
    """What a publish records for a partition: a prefix of ``partition_checksum``."""
    return partition_checksum(rows)[:RECORDED_CHECKSUM_HEX]


def checksum_matches(recorded: str, actual: str) -> bool:
    """Whether a recorded checksum (a prefix of at least 16 characters, or the full digest) matches."""
    return len(recorded) >= RECORDED_CHECKSUM_HEX and actual.startswith(recorded)


@dataclass(frozen=True)
class BatchIdentity:
    dataset: str
    source: str
    start: Vector
    end: Vector
    events_sha256: str

    @property
    def batch_id(self) -> str:
        return fingerprint(
            "lakepub-batch-v1",
            self.dataset,
            self.source,
            positions.dumps(positions.normalize(self.start)),
            positions.dumps(positions.normalize(self.end)),
            self.events_sha256,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "batch_id": self.batch_id,
            "dataset": self.dataset,
            "source": self.source,
            "start": positions.normalize(self.start),
            "end": positions.normalize(self.end),
            "events_sha256": self.events_sha256,
        }
