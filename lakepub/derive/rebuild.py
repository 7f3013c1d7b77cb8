"""Offline rebuild: a new data version is built beside the published table, audited, then swapped in.

When a derived dataset's data version changes (its query, columns, partitioning or an upstream
column it reads changed), ``lakepub reconcile`` does not rewrite the published table partition by
partition (readers would see two versions side by side). It builds the new version into an
isolated table, ``<dataset>__rebuild_<first 12 hex of the data version>``, window by window
(the same windows, fingerprints and commits as a routine run; no ``lakepub query`` view names
it), so readers keep reading the old version. When no window is pending, the build is audited:

- every partition the rebuild recorded is read back and its checksum recomputed: it must equal
  the recorded one, and the rows read must total the rows written;
- the rebuild's plan must be empty (every candidate partition at the new data version and its
  inputs' current fingerprints); else an input moved just before the swap: exit 4 (retry family,
  the rebuild is kept; the next reconcile computes what moved and swaps).

Then ONE catalog transaction (``store/commit.swap_table``) points the published table at the
rebuilt table's metadata, asserting the published pointer is the one the rebuild started from
(else exit 4: retry; the rebuild is kept and resumes), and drops the rebuild's catalog entry.

Resumable: the rebuild table is named by the data version, so a run that crashed (or a job
runner's ``--window`` fan-out) leaves committed windows that the next run's plan does not list
again; the next ``lakepub reconcile DATASET`` computes the rest, audits and swaps. Needs a SQL
catalog (SQLite, PostgreSQL): elsewhere it is refused (exit 3).

Table properties: the swap replaces the published table's metadata, its properties with it. So
the rebuild's last commit before the swap (``carry_properties``) sets on the rebuild table every
property of the published table that lakepub does not own or derive from the definition (a
user's ``comment``, ``write.*`` or ``owner`` property set with pyiceberg or Spark): keys
``lakepub.*`` (records such as the retirement one), ``write.metadata.metrics.*`` (set from the
new partitioning), ``schema.name-mapping.default`` (names of the old schema) and
``format-version`` are the rebuild's. A property the published table lost (removed by hand) but
the rebuild table has from its creation defaults stays. One metadata commit, no data read.

What is swapped in is exactly what was audited: the property commit compare-and-sets the rebuild
table's pointer from the metadata location the audit read (lakepub's commit, which also writes
the version hint), and the swap asserts the rebuild's pointer is the one that commit (or, with
no property to carry, the audit) left. A window another process committed to the rebuild in
between (a concurrent ``reconcile --window``, a resumed rebuild) fails either: exit 4, nothing
published, and the next ``reconcile`` plans and audits again (tests/test_rebuild_audit_race.py).

After the swap the published table's files live under the rebuild's folder; the old version's
folder is no longer any table's: the janitor deletes it as superseded (maintenance/superseded.py),
as it does the folder of an abandoned rebuild table once ``reconcile`` dropped it. Cost: the whole dataset computed once more, plus one read-back of it.
"""

from __future__ import annotations

import re

from lakepub.derive.compute import WindowRefused
from lakepub.derive.state import EMPTY_CHECKSUM, WHOLE, Batching, Context, actual_state, plan_dataset
from lakepub.errors import CommitContention, VerifyFailed

MARK = "__rebuild_"
# Properties the rebuild table sets itself: lakepub's records and what the definition derives.
_OWN_PREFIXES = ("lakepub.", "write.metadata.metrics.")
_OWN_KEYS = frozenset({"format-version", "schema.name-mapping.default"})


def carried_properties(published: dict[str, str], rebuilt: dict[str, str]) -> dict[str, str]:
    """The published table's properties to set on the rebuild table before the swap."""
    return {k: v for k, v in published.items()
            if not k.startswith(_OWN_PREFIXES) and k not in _OWN_KEYS and rebuilt.get(k) != v}


def carry_properties(ctx: Context, name: str, audited) -> str:
    """Commit the published table's user properties onto the rebuild table as it was audited
    (``audited``, a loaded Table) if any differ; returns the metadata location to swap in.

    lakepub's commit (``store/commit.commit_atomically``), not pyiceberg's: pyiceberg's SQL
    catalog validates a transaction's requirements against the table as it reloads it at commit
    time, so a window another process committed since the audit was silently built upon (and
    then swapped in unaudited). lakepub's compare-and-sets the pointer from the audited metadata
    location (a window committed since: CommitContention, exit 4; the next run re-audits), and
    writes the version hint after it. A requirement on main would add nothing: it is checked
    against the audited metadata itself."""
    from lakepub.store.commit import CommitConflict, TableChange, commit_atomically
    from lakepub.store.write import transaction

    ctx.forget(name)  # if it moved since the rebuild was planned, the swap fails anyway (exit 4)
    carry = carried_properties(ctx.table(name).properties, audited.properties)
    if not carry:
        return audited.metadata_location
    tx = transaction(audited)
    tx.set_properties(carry)
    ident = ".".join(audited.name())
    try:
        return commit_atomically(ctx.ws.catalog, [TableChange(audited, tx)])[ident]
    except CommitConflict as exc:
        raise CommitContention(_MOVED.format(into=ident, exc=exc)) from exc


_MOVED = ("the rebuild {into} moved after its audit ({exc}): another process committed to it; nothing was "
          "published, the rebuild is kept: run 'lakepub reconcile' again (it re-audits)")


def rebuild_name(name: str, data_version: str) -> str:
    return f"{name}{MARK}{data_version.split(':')[-1][:12]}"


_REBUILD_TABLE = re.compile(r"(.+)__rebuild_([0-9a-f]{12})")


def list_rebuilds(catalog, namespace: str) -> dict[str, list[str]]:
    """{dataset: its rebuild tables in the catalog, sorted} (one catalog listing)."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        names = sorted(ident[-1] for ident in catalog.list_tables(namespace))
    except NoSuchNamespaceError:
        return {}
    out: dict[str, list[str]] = {}
    for table in names:
        if match := _REBUILD_TABLE.fullmatch(table):
            out.setdefault(match.group(1), []).append(table)
    return out


def abandoned_rebuilds(ctx: Context, name: str, *versions: str | None) -> list[str]:
    """The rebuild tables of ``name`` built for a data version that is none of ``versions`` (the
    published and the desired one): a definition changed again (or reverted) mid-rebuild."""
    keep = {rebuild_name(name, v) for v in versions if v}
    return [t for t in ctx.rebuild_tables().get(name, []) if t not in keep]


def drop_abandoned(ctx: Context, name: str, abandoned: list[str]) -> list[str]:
    """Drop the catalog entries of ``abandoned`` rebuild tables of ``name`` (their folders are then
    superseded: the janitor's sweep deletes them, maintenance/superseded.py); the ones dropped."""
    from lakepub.store.layout import summary_id

    dropped = []
    for table in abandoned:
        loaded = ctx.table(table)
        if loaded is not None and drop_if_unmoved(ctx.ws.catalog, summary_id(ctx.ws.config.namespace, table),
                                                  loaded.metadata_location):
            dropped.append(table)
        ctx.forget(table)
    return dropped


def drop_if_unmoved(catalog, ident, location: str) -> bool:
    """Drop table ``ident`` if it still is at metadata ``location`` (a concurrent writer's table is
    kept); whether it was dropped. Its files stay (the janitor sweeps superseded folders)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        if catalog.load_table(ident).metadata_location == location:
            catalog.drop_table(ident)
            return True
    except NoSuchTableError:
        pass
    return False


def finish(ctx: Context, name: str, into: str, expected: str, batching: Batching) -> str:
    """Audit the complete rebuild ``into`` of ``name`` and swap it in; returns the new metadata
    location. ``expected``: the published metadata location the rebuild was planned against."""
    from lakepub.store.commit import CommitConflict, commit_mode, swap_table
    from lakepub.store.layout import summary_id

    if commit_mode(ctx.ws.catalog, ctx.ws.config.commit) != "atomic":
        raise WindowRefused(f"{name} has a new data version: an offline rebuild swaps tables in one catalog "
                            "transaction, which needs a SQL catalog (SQLite or PostgreSQL)")
    ctx.forget(into)
    again = plan_dataset(ctx, name, batching, abandoned=False)  # the swap needs no listing of rebuild tables
    if again.blocked:
        raise WindowRefused(f"cannot swap in the rebuild {into} of {name}: {again.blocked}")
    if again.rebuild != into or again.pending:
        # An input moved (or another process swapped or extended the rebuild) since the windows
        # were planned: a retry plans the partitions it made stale and swaps. Retry family (exit 4).
        raise CommitContention(f"{name} or its inputs moved just before its rebuild {into} was swapped in "
                               f"({sum(len(w.pending) for w in again.pending)} partition(s) pending again); the "
                               "rebuild is kept: run 'lakepub reconcile' again")
    table = ctx.table(into)  # what is audited is what is swapped in: its pointer is asserted until the swap
    audit(ctx, name, into)
    if ctx.table(into) is not table:
        raise CommitContention(_MOVED.format(into=into, exc="reloaded during the audit"))
    audited = carry_properties(ctx, name, table)
    ns = ctx.ws.config.namespace
    try:
        location = swap_table(ctx.ws.catalog, summary_id(ns, name), expected, summary_id(ns, into),
                              rebuilt_location=audited)
    except CommitConflict as exc:
        raise CommitContention(f"{name} moved while its rebuild {into} was built, or the rebuild since its audit "
                               f"({exc}); nothing was published, the rebuild is kept: run 'lakepub reconcile' "
                               "again (it re-audits)") from exc
    ctx.forget(name)
    ctx.forget(into)
    return location


def _whole_checksums(table) -> dict[str, str]:
    """{label: checksum} the newest '*' window recorded (its record holds every partition's)."""
    import json

    from lakepub.derive.state import PARTITIONS_PROPERTY
    from lakepub.store.record import published_history

    for snapshot, record in published_history(table):
        if WHOLE in json.loads(snapshot.summary.additional_properties.get(PARTITIONS_PROPERTY, "{}")):
            return {label: c for label, c in record.checksums.items() if label != WHOLE}
    return {}


def audit(ctx: Context, name: str, into: str) -> int:
    """Recompute every recorded partition checksum of the rebuild from its rows; the rows read.

    The rows are read back by DuckDB's ``iceberg_scan`` of the audited metadata file: DuckDB
    decodes the snapshot's manifest list and manifests from their bytes (what the swap publishes,
    never the entries this process remembers writing, ``store.duck_files.live_files``: a manifest
    that lacks a file the window wrote fails the audit, tests/test_review_derive_merge14.py) and
    reads the files they list, columns by Iceberg field id. All partitions' checksums come from one
    sort (``derive/output.py``): a pyiceberg scan of the 365 files of a daily rollup, split with a
    filter per partition and hashed one by one, cost ~1 s. ``iceberg_scan``, not ``lakepub
    query``'s ``read_parquet`` view (``views.py``): that view first decodes the manifests in
    Python (pyiceberg's Avro reader, ~25-30 ms for 365 entries on the shared 2-core VM) and was
    slower to read the same 365 files; measured 89 -> 50 ms wall for the 365-file rollup (15
    interleaved rounds, load ~3.5). The audit is also a second decoder: its file list does not
    come from the Python code whose manifests it checks.

    Before DuckDB plans the scan, ``store.integrity.check_scannable`` reads every manifest with
    pyiceberg (as ``views.resolve`` does before an ``iceberg_scan`` view): DuckDB 1.5.5 aborts the
    whole process (C++ ``terminate``, exit 134, no message) on a manifest it cannot read (missing,
    not Avro, truncated, another schema), where this raises CorruptTable naming the file, nothing
    published (tests/test_review_derive_scan_audit.py). That check is pyiceberg's decode of the
    manifests again: the audit of a 365-file rollup measured 37 -> 47 ms wall, CPU 35 -> 42 ms
    (15 alternate rounds in one process, load ~8.5; at load ~11: 71 -> 102 ms, CPU 46 -> 58 ms);
    with the codec check below too, 38 -> 46 ms (CPU 38 -> 45) and 47 -> 59 ms at load ~5.3.
    A manifest list or manifest in an Avro codec DuckDB 1.5.5 does not decode (zstandard, bzip2,
    snappy: a user's ``write.avro.compression-codec``, carried onto the rebuild by the swap, then
    used by a resumed rebuild's windows) is read as ``lakepub query`` reads it instead: the
    ``read_parquet`` view of the files pyiceberg's decode lists (``views.py``).
    """
    from lakepub import duck, views
    from lakepub.derive.output import group
    from lakepub.identity import RECORDED_CHECKSUM_HEX
    from lakepub.store.integrity import check_scannable, duckdb_can_decode

    table = ctx.table(into)
    spec = ctx.graph.derived[name]
    schema = ctx.resolved[name].schema
    rows = schema.empty_table()
    source = None
    if table.metadata.current_snapshot_id is not None:
        check_scannable(table)  # a manifest DuckDB cannot read would abort the process, not raise
        if duckdb_can_decode(table):
            source = duck.scan_sql(table.metadata_location)  # its current snapshot: the audited one
        else:  # e.g. zstd manifests: pyiceberg's decode of the manifests, DuckDB's read of the files
            resolution = views.resolve(table)
            if resolution.fallback != "no data files":  # no file, no row (its fallback is an iceberg_scan)
                source = resolution.table_sql()
    if source is not None:
        con = duck.connect(ctx.ws.config.catalog)
        try:
            rows = con.execute(f"SELECT * FROM {source}").to_arrow_table().select(schema.names).cast(schema)
        finally:
            con.close()
    grouped = group(rows, spec.partition)
    by_label = {label: checksum[:RECORDED_CHECKSUM_HEX] for label, checksum in grouped.checksums.items()}
    recorded, _ = actual_state(table)
    expected = {label: a.checksum for label, a in recorded.items()}
    if WHOLE in expected:  # the '*' window (inputs all `all`) records every partition's checksum in its record
        expected = _whole_checksums(table)
    for label, checksum in expected.items():
        got = by_label.get(label, EMPTY_CHECKSUM)
        if got != checksum:
            raise VerifyFailed(f"rebuild audit of {name}: partition {label} of {into} has checksum {got}, recorded "
                               f"{checksum}; the published table was not touched")
    unrecorded = sorted(set(by_label) - {label for label, c in expected.items() if c != EMPTY_CHECKSUM})
    if unrecorded:
        raise VerifyFailed(f"rebuild audit of {name}: partition {unrecorded[0]} of {into} holds rows no window "
                           "recorded; the published table was not touched")
    return rows.num_rows
