"""Desired vs actual, partition by partition: the plan of a derived dataset.

For an output partition P of derived dataset D:

- **desired** = (D's data version, P's *input fingerprint*): a sha256 over, for each input
  ``name: t(col)``, the checksums its published snapshot records (``lakepub.checksums``, newest
  per partition) for the upstream partitions that can hold rows with ``t(col) = P``, and for an
  ``all`` input the checksums of all its partitions;
- **actual** = what the newest snapshot of D that wrote P recorded: its data version
  (``lakepub.data-version``) and P's fingerprint (``lakepub.derive-partitions``).

P is *missing* (never computed), *stale* (another data version, or an input fingerprint that
moved), an *orphan* (computed non-empty, but no input partition maps to it any more), or
current; ``lookback: N`` recomputes the newest N candidates whatever their state (the newest
by label, the ``null`` partition never counting as one). Candidates are
the output partitions the inputs' partitions map to: an input partitioned by the same column at
the same or a finer time grain maps by label (``2025-10-03`` -> ``2025-10``); at a coarser grain
P reads the one upstream partition its label falls in, and the candidates come from a
``SELECT DISTINCT`` of the input column (a read of that column, once per input snapshot:
``derive/labels.py`` remembers it); any other input (partitioned otherwise) reads all its
partitions for every P, candidates again from ``SELECT DISTINCT``. A dataset whose inputs are all ``all`` is one window,
``*``: every output partition at once.

Windows pack the partitions (every candidate, not only the pending ones) in label order into
chunks of ``batch_partitions`` or into calendar spans of ``batch_days``; a window's id is the
sha256 of the dataset and its labels, so ids stay stable while windows complete, and a job
runner can fan ``lakepub reconcile D --window ID`` out (same batch options as the plan).

Cost: reading the checksum records of each upstream (one walk of its snapshot history) and of D;
no data is read unless an input is partitioned otherwise than its expression.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pyarrow as pa

from lakepub.derive.model import DerivedSpec, Graph
from lakepub.derive.schema import Resolved, resolve
from lakepub.derive.version import Version, digest, remembered_digest, versions
from lakepub.projection.partitioning import PartitionBy

WHOLE = "*"
PARTITIONS_PROPERTY = "lakepub.derive-partitions"
PARTS_PROPERTY = "lakepub.data-version-parts"
WINDOW_PROPERTY = "lakepub.derive-window"
EMPTY_CHECKSUM = hashlib.sha256(b"lakepub-partition-v1").hexdigest()[:16]
_GRAIN = {"day": 10, "month": 7, "year": 4}  # label prefix lengths: 2025-10-03, 2025-10, 2025


@dataclass(frozen=True)
class Actual:
    data_version: str
    fingerprint: str
    checksum: str


@dataclass
class Window:
    id: str
    partitions: list[str]  # every partition of the window, in label order
    pending: list[str] = field(default_factory=list)  # the ones to compute
    why: dict[str, str] = field(default_factory=dict)  # pending partition -> missing | stale: ... | lookback

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "first": self.partitions[0], "last": self.partitions[-1],
                "partitions": len(self.partitions), "pending": self.pending, "why": self.why}


@dataclass
class DatasetPlan:
    dataset: str
    kind: str  # base | derived
    current_version: str | None
    desired_version: str
    change: str  # new | breaking | non-breaking | untouched
    reasons: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    blocked: str | None = None
    rebuild: str | None = None  # the table a new data version is built into offline (rebuild.py)
    abandoned: list[str] = field(default_factory=list)  # rebuild tables of neither version (rebuild.py)

    @property
    def pending(self) -> list[Window]:
        return [w for w in self.windows if w.pending]

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "kind": self.kind, "current_version": self.current_version,
                "desired_version": self.desired_version, "change": self.change, "reasons": self.reasons,
                "blocked": self.blocked, "rebuild": self.rebuild, "abandoned_rebuilds": self.abandoned,
                "pending_partitions": sum(len(w.pending) for w in self.windows),
                "windows": [w.as_dict() for w in self.pending]}


@dataclass(frozen=True)
class Batching:
    partitions: int | None = None
    days: int | None = None

    def label(self) -> str:
        return f"days={self.days}" if self.days else f"partitions={self.partitions or DEFAULT_BATCH}"


# A year of days per window: a full build of a daily dataset is one DuckDB query, one write of its
# partition files and one commit (12 windows of 31 cost 2-3x one window: per window a plan of the
# table's files, a manifest rewrite and a catalog commit); a routine run computes only the pending
# partitions of a window whatever its size. Smaller windows (--batch-partitions) bound the rows a
# window holds in memory and the work a crash loses.
DEFAULT_BATCH = 366


class Context:
    """The graph of a workspace with its resolved schemas and desired versions, and the published
    tables as loaded (``forget`` reloads one after it was reconciled)."""

    def __init__(self, ws):
        self.ws = ws
        config = ws.config
        self.graph = Graph(dict(config.datasets), dict(config.derived), list(config.derived))
        self.resolved: dict[str, Resolved] = resolve(self.graph, config.root / ".lakepub" / "derive")
        self.versions: dict[str, Version] = versions(self.graph, self.resolved)
        self._tables: dict[str, Any] = {}
        self._checksums: dict[str, dict[str, str]] = {}
        self._rebuilds: dict[str, list[str]] | None = None

    def fork(self) -> "Context":
        """A context for another thread: the same workspace (its catalog is thread-safe), graph,
        schemas and versions, its own table caches (``forget`` in one thread must not race a
        load in another)."""
        other = object.__new__(Context)
        other.ws, other.graph, other.resolved, other.versions = self.ws, self.graph, self.resolved, self.versions
        other._tables, other._checksums, other._rebuilds = {}, {}, None
        return other

    def rebuild_tables(self) -> dict[str, list[str]]:
        """{dataset: its ``<dataset>__rebuild_<hex>`` tables in the catalog} (one listing, cached)."""
        if self._rebuilds is None:
            from lakepub.derive.rebuild import list_rebuilds

            self._rebuilds = list_rebuilds(self.ws.catalog, self.ws.config.namespace)
        return self._rebuilds

    def table(self, name: str):
        """The published table of ``name`` (None if never published)."""
        if name not in self._tables:
            from pyiceberg.exceptions import NoSuchTableError

            from lakepub.store.commit import load_table
            from lakepub.store.layout import summary_id

            try:
                self._tables[name] = load_table(self.ws.catalog, summary_id(self.ws.config.namespace, name))
            except NoSuchTableError:
                self._tables[name] = None
        return self._tables[name]

    def remember(self, name: str, table):
        """Take ``table`` as ``name``'s table as loaded now (just created or committed); returns it."""
        self.forget(name)
        self._tables[name] = table
        return table

    def checksums(self, name: str) -> dict[str, str]:
        """{partition label: recorded checksum} of an upstream's published table."""
        if name not in self._checksums:
            from lakepub.store.record import recorded_checksums

            table = self.table(name)
            self._checksums[name] = recorded_checksums(table) if table is not None else {}
        return self._checksums[name]

    def forget(self, name: str) -> None:
        self._tables.pop(name, None)
        self._checksums.pop(name, None)
        if "__rebuild_" in name:  # created or dropped
            self._rebuilds = None

    def partition_of(self, name: str) -> PartitionBy:
        spec = self.graph.base.get(name) or self.graph.derived[name]
        return spec.partition


# --- desired ---------------------------------------------------------------------------------


def _empty(checksum: str) -> bool:
    """An upstream partition recorded empty: version 1's empty checksum, or a ``current``
    dataset's version 2 zero sum (``projection/checksum.py``)."""
    from lakepub.projection.checksum import is_empty

    return is_empty(checksum, EMPTY_CHECKSUM)


def upstream_map(ctx: Context, spec: DerivedSpec, name: str) -> str | None:
    """How input ``name``'s partitions map to output labels: ``same`` (a label is an output
    label), ``finer`` (a label's prefix is), ``coarser`` (P's prefix is the one label P reads;
    candidates then come from the data), or None (not by label: every P reads all of it)."""
    expr = spec.inputs[name].expr
    upstream = ctx.partition_of(name)
    if expr is None or upstream.column != expr.column:
        return None
    if upstream.kind == expr.kind:  # bucket(16, c) is not bucket(8, c): another partitioning
        return "same" if upstream.buckets == expr.buckets else None
    if upstream.kind in _GRAIN and expr.kind in _GRAIN and _GRAIN[upstream.kind] > _GRAIN[expr.kind]:
        return "finer"
    if upstream.kind in _GRAIN and expr.kind in _GRAIN:
        return "coarser"
    return None


def candidates(ctx: Context, spec: DerivedSpec) -> set[str]:
    """The output partitions some input row maps to (non-empty upstream partitions)."""
    out: set[str] = set()
    for name, inp in spec.partitioned_inputs.items():
        mapping = upstream_map(ctx, spec, name)
        live = [u for u, c in ctx.checksums(name).items() if not _empty(c)]
        if mapping == "same":
            out.update(live)
        elif mapping == "finer":
            out.update(u[:_GRAIN[inp.expr.kind]] for u in live)
        else:
            out.update(_distinct_labels(ctx, name, inp.expr))
    return out


def _distinct_labels(ctx: Context, name: str, expr: PartitionBy) -> set[str]:
    """The labels of ``expr`` over an input's published rows (``derive/labels.py``: scanned with
    DuckDB once per input snapshot, remembered in the process and the workspace)."""
    from lakepub.derive.labels import distinct_labels

    return distinct_labels(ctx.ws, ctx.table(name), expr)


def fingerprint(ctx: Context, spec: DerivedSpec, label: str) -> str:
    """The input fingerprint of output partition ``label`` (``WHOLE``: of the whole dataset).

    Remembered by what the label reads (``version.remembered_digest``): the 30 days of a month
    read one ``month(day)`` partition, and a build computes every print in its plan and in its
    window, a rebuild a third time before the swap: 365 prints ~15-19 ms -> ~1 ms (load ~18)."""
    parts: dict[str, Any] = {}
    for name, inp in spec.inputs.items():
        checks = ctx.checksums(name)
        mapping = upstream_map(ctx, spec, name) if label != WHOLE else None
        if mapping == "same":
            parts[name] = {label: checks.get(label, EMPTY_CHECKSUM)}
        elif mapping == "finer":
            n = _GRAIN[inp.expr.kind]
            parts[name] = {u: c for u, c in sorted(checks.items()) if u[:n] == label and not _empty(c)}
        elif mapping == "coarser":
            upstream = label[:_GRAIN[ctx.partition_of(name).kind]]
            parts[name] = {upstream: checks.get(upstream, EMPTY_CHECKSUM)}
        else:
            parts[name] = digest(sorted(checks.items()))
    # the key is ``parts`` itself, frozen (dicts keep their order, so it determines the digest)
    key = tuple((name, tuple(v.items()) if isinstance(v, dict) else v) for name, v in parts.items())
    return remembered_digest(key, parts)


# --- actual ----------------------------------------------------------------------------------


def actual_state(table) -> tuple[dict[str, Actual], dict[str, Any] | None]:
    """{label: what the newest snapshot that wrote it recorded}, and the newest record's
    (data version, parts) (None before the first computed window)."""
    from lakepub.store.record import published_history

    out: dict[str, Actual] = {}
    newest = None
    if table is None:
        return out, None
    for snapshot, record in published_history(table):
        props = snapshot.summary.additional_properties
        prints = json.loads(props.get(PARTITIONS_PROPERTY, "{}"))
        if newest is None:
            newest = {"data_version": record.data_version, "parts": json.loads(props.get(PARTS_PROPERTY, "{}"))}
        for label, fp in prints.items():
            if label not in out:
                out[label] = Actual(record.data_version, fp, record.checksums.get(label, EMPTY_CHECKSUM))
    return out, newest


# --- the plan --------------------------------------------------------------------------------


def plan_dataset(ctx: Context, name: str, batching: Batching = Batching(), abandoned: bool = True) -> DatasetPlan:
    """The plan of ``name``; ``abandoned=False``: without looking for abandoned rebuild tables
    (a catalog listing; the rebuild's check just before its swap does not need them)."""
    from lakepub.derive.rebuild import abandoned_rebuilds

    plan = _plan_base(ctx, name) if name in ctx.graph.base else _plan_derived(ctx, name, batching)
    if abandoned:
        plan.abandoned = abandoned_rebuilds(ctx, name, plan.current_version, plan.desired_version)
    return plan


def _plan_derived(ctx: Context, name: str, batching: Batching) -> DatasetPlan:
    spec = ctx.graph.derived[name]
    desired = ctx.versions[name]
    table = ctx.table(name)
    actual, newest = actual_state(table)
    change, reasons = _change(desired, newest)
    plan = DatasetPlan(name, "derived", newest["data_version"] if newest else None, desired.data_version,
                       change, reasons)
    missing = [u for u in spec.inputs if (t := ctx.table(u)) is None or t.metadata.current_snapshot_id is None]
    if missing:
        plan.blocked = f"input {missing[0]} has no published snapshot yet"
        return plan
    for changed in [*spec.inputs, name]:
        plan.blocked = foreign_change(ctx, changed)
        if plan.blocked:
            return plan
    if change == "breaking" and table is not None and table.metadata.current_snapshot_id is not None:
        # A new data version is built offline beside the published table, then swapped in.
        from lakepub.derive.rebuild import rebuild_name

        plan.rebuild = rebuild_name(name, desired.data_version)
        table = ctx.table(plan.rebuild)
        actual, _ = actual_state(table)
    if table is not None and table.metadata.current_snapshot_id is not None:
        mismatch = schema_mismatch(ctx, name, table)
        if mismatch:
            plan.blocked = mismatch
            return plan
    if not spec.partitioned_inputs:
        labels = [WHOLE]
        desired_fp = {WHOLE: fingerprint(ctx, spec, WHOLE)}
    else:
        # Every label the table recorded, emptied ones too: a window that empties a partition must
        # not take its label out of the packing, or every later window's id would change under a
        # job runner fanning them out.
        labels = sorted(candidates(ctx, spec) | set(actual))
        desired_fp = {label: fingerprint(ctx, spec, label) for label in labels}
    # Lookback is for late data in routine runs: a rebuild computes every partition once anyway.
    # The newest N non-null labels: "null" (rows whose partition column is null) sorts last.
    lookback = set([label for label in sorted(desired_fp) if label != "null"][-spec.lookback:]) \
        if spec.lookback and labels != [WHOLE] and not plan.rebuild else set()
    why: dict[str, str] = {}
    for label in labels:
        have = actual.get(label)
        if have is None:
            why[label] = "missing"
        elif have.data_version != desired.data_version:
            why[label] = "stale: computed under another data version"
        elif have.fingerprint != desired_fp[label]:
            why[label] = "stale: its input partitions changed"
        elif label in lookback:
            why[label] = "lookback"
    plan.windows = pack(name, spec, labels, why, batching)
    return plan


def _plan_base(ctx: Context, name: str) -> DatasetPlan:
    from lakepub.ops.data_version import of_dataset
    from lakepub.store.record import latest_record

    desired = ctx.versions[name]
    table = ctx.table(name)
    current = of_dataset(table, ctx.graph.base[name], latest_record(table)) if table is not None else None
    if current is None:
        return DatasetPlan(name, "base", None, desired.data_version, "new",
                           ["never published: 'lakepub run' publishes it from its events"])
    if current == desired.data_version:
        return DatasetPlan(name, "base", current, desired.data_version, "untouched")
    return DatasetPlan(name, "base", current, desired.data_version, "breaking",
                       ["its definition or contract changed since it was published ('lakepub run' refuses a "
                        f"changed definition: 'lakepub rebuild {name}' builds it offline and swaps it in)"])


def _change(desired: Version, newest: dict[str, Any] | None) -> tuple[str, list[str]]:
    if newest is None:
        return "new", ["never computed"]
    parts = newest["parts"] or {}
    if newest["data_version"] == desired.data_version:
        if parts.get("definition_sha") and parts["definition_sha"] != desired.definition_sha:
            return "non-breaking", ["description, owner, schedule or lookback changed: same data version, "
                                    "no partition recomputed for it"]
        return "untouched", []
    reasons = []
    if parts.get("definition") != desired.definition:
        reasons.append("definition changed (query, inputs, columns or partitioning)")
    before = parts.get("upstream") or {}
    for col in sorted(set(before) | set(desired.upstream)):
        if col not in desired.upstream:
            reasons.append(f"no longer reads {col}")
        elif col not in before:
            reasons.append(f"now reads {col}")
        elif before[col] != desired.upstream[col]:
            reasons.append(f"upstream column {col} has a new version")
    return "breaking", reasons or ["data version changed"]


def foreign_change(ctx: Context, name: str) -> str | None:
    """Why dataset ``name``'s published table cannot be trusted (None if it can): its current
    snapshot was written by another tool and its rows differ from the checksums lakepub recorded.

    Fingerprints and the actual state come from lakepub's records only, so rows another tool
    wrote would otherwise go unseen: a derived partition computed over them, or holding them,
    would be taken for current. A foreign snapshot that keeps the data (an engine's compaction)
    passes. Cost: nothing unless the head is foreign; then one read of the table."""
    from lakepub.store.record import foreign_head

    table = ctx.table(name)
    head = foreign_head(table) if table is not None else None
    if head is None:
        return None
    from lakepub.publish.guards import describe, partition_count_mismatches, partition_mismatches
    from lakepub.store.record import latest_published, recorded_checksums

    base = ctx.graph.base.get(name)
    schema = base.kind.output_schema() if base is not None else ctx.resolved[name].schema
    latest = latest_published(table)
    try:
        rows = table.scan().to_arrow().select(schema.names).cast(schema)
        _, mismatches = partition_mismatches(recorded_checksums(table), rows, ctx.partition_of(name))
        mismatches += partition_count_mismatches(latest, rows, ctx.partition_of(name))
    except (KeyError, ValueError, TypeError, pa.ArrowException) as exc:
        mismatches = [f"its rows no longer have the dataset's columns ({' '.join(str(exc).split())[:120]})"]
    if not mismatches:
        return None
    restore = (f"roll {name} back to lakepub's snapshot {latest[0].snapshot_id} (pyiceberg: "
               f"table.manage_snapshots().rollback_to_snapshot({latest[0].snapshot_id}).commit())"
               if latest else f"remove the data written outside lakepub from {name}")
    return (f"dataset '{name}': {describe(head)} and changed the published data ({len(mismatches)} mismatch(es); "
            f"{mismatches[0]}); {restore}, then reconcile again")


def schema_mismatch(ctx: Context, name: str, table) -> str | None:
    """Why the published table cannot take the definition's rows in place (None if it can)."""
    from lakepub.projection.partitioning import iceberg_type
    from lakepub.store.published import partition_of

    # A new data version is rebuilt offline, so under one data version this means the table was
    # changed by another tool (or its definition edited back and forth by hand).
    have = [(f.name, str(f.field_type)) for f in table.schema().fields]
    want = [(f.name, str(iceberg_type(f.type))) for f in ctx.resolved[name].schema]
    advice = "it was changed outside lakepub: drop the table to have 'lakepub reconcile' compute it again"
    if have != want:
        return (f"the table's columns ({', '.join(n for n, _ in have)}) are not the query's "
                f"({', '.join(n for n, _ in want)}): {advice}")
    if partition_of(table) != str(ctx.graph.derived[name].partition):
        return f"the table's partition ({partition_of(table)}) is not {ctx.graph.derived[name].partition}: {advice}"
    return None


def pack(name: str, spec: DerivedSpec, labels: list[str], why: dict[str, str], batching: Batching) -> list[Window]:
    """The windows of ``labels`` (sorted), with their pending partitions."""
    chunks: list[list[str]] = []
    if batching.days and labels != [WHOLE] and spec.partition.kind in _GRAIN:  # else: by partitions
        keys: dict[int, list[str]] = {}
        for label in labels:
            key = -1 if label == "null" else (_start(label) - date(1970, 1, 1)).days // batching.days
            keys.setdefault(key, []).append(label)
        chunks = [keys[k] for k in sorted(keys)]
    else:
        size = batching.partitions or DEFAULT_BATCH
        chunks = [labels[i:i + size] for i in range(0, len(labels), size)]
    out = []
    for chunk in chunks:
        wid = hashlib.sha256(("\0".join([name, *chunk])).encode("utf-8")).hexdigest()[:12]
        pending = [label for label in chunk if label in why]
        out.append(Window(wid, chunk, pending, {label: why[label] for label in pending}))
    return out


def _start(label: str) -> date:
    parts = [int(p) for p in label.split("-")] + [1, 1]
    return date(parts[0], parts[1], parts[2])


def label_range(kind: str, label: str) -> tuple[date, date]:
    """[first day, day after the last) of a day/month/year partition label."""
    start = _start(label)
    if kind == "day":
        return start, start + timedelta(days=1)
    if kind == "month":
        return start, date(start.year + (start.month == 12), start.month % 12 + 1, 1)
    return start, date(start.year + 1, 1, 1)


def plan(ctx: Context, names: list[str] | None = None, batching: Batching = Batching()) -> list[DatasetPlan]:
    """The plan of ``names`` (default: every dataset), base datasets first, derived in graph order."""
    wanted = set(names) if names else set(ctx.graph.base) | set(ctx.graph.derived)
    for n in wanted:
        if n not in ctx.graph.base and n not in ctx.graph.derived:
            ctx.ws.config.dataset(n)  # UnknownDataset, exit 2
    order = [n for n in sorted(ctx.graph.base) if n in wanted] + [n for n in ctx.graph.order if n in wanted]
    return [plan_dataset(ctx, n, batching) for n in order]


def as_json(plans: list[DatasetPlan], batching: Batching) -> dict[str, Any]:
    return {"format": 1, "batching": batching.label(), "datasets": [p.as_dict() for p in plans]}

