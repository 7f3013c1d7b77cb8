"""A batch before and after the publish protocol: what needs no table, and the outcome.

``prepare`` is everything of a publish that can run before any table is read (canonical sort,
digest, publish gates, the batch side of the projection), so ``Workspace.run`` prepares the next
batch in its read-ahead thread while the current one publishes (``publish/publisher.py``).
``PublishResult`` is what a caller gets back, also as JSON (``lakepub publish --format json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pyarrow as pa

from lakepub.contract import gates
from lakepub.contract.model import Contract
from lakepub.identity import canonical, events_digest
from lakepub.positions import Vector
from lakepub.publish.versioning import BatchSide, Shape, prepare_batch
from lakepub.store.record import Counts


@dataclass(frozen=True)
class PreparedBatch:
    """A batch's events in canonical order, their digest and the batch side of the projection
    (``prepare``)."""

    events: pa.Table
    digest: str
    side: BatchSide  # of the events the publish gates accept (all of them without gates)
    verdict: gates.Verdict | None = None  # None: the contract declares no gate


def prepare(events: pa.Table, contract: Contract) -> PreparedBatch:
    """Everything of a publish that needs no table: sort the events canonically, digest them, and
    compute the batch side of the projection (``Workspace.run`` prepares the next batch in its
    read-ahead thread while the current one publishes)."""
    events = canonical(events, contract)  # sorted once: the digest and the projection both need it
    gate = gates.Gates.of(contract)  # None (a cached lookup) for a contract without constraints to check
    verdict = gate.apply(events) if gate is not None else None
    accepted = verdict.accepted if verdict is not None else events
    return PreparedBatch(events, events_digest(events, contract, is_canonical=True),
                         prepare_batch(accepted, Shape.of(contract)), verdict)


@dataclass(frozen=True)
class PublishResult:
    """One batch's outcome: ``status`` (published / already-published), the snapshot of the
    dataset named, the batch identity, positions, counts and the partitions rewritten."""

    status: str  # "published" or "already-published"
    dataset: str
    batch_id: str
    snapshot_id: int | None
    source: str
    start: Vector
    end: Vector
    positions: dict[str, Vector]
    counts: Counts
    partitions: list[str] = field(default_factory=list)
    attempts: int = 1
    datasets: dict[str, list[str]] = field(default_factory=dict)  # every dataset moved -> its rewritten partitions

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub publish --format json``)."""
        out = asdict(self)
        out["counts"] = asdict(self.counts)
        return out
