"""The Python API: a workspace facade used by the CLI, scripts and schedulers.

>>> ws = Workspace.open(".")
>>> result = ws.publish("orders_daily", "batch.jsonl", source="orders", start={"p0": 0}, end={"p0": 4})
>>> ws.run("orders_daily")                       # drain the landing folder
>>> ws.connect().sql("SELECT * FROM orders_daily ORDER BY day").fetchall()
>>> ws.status("orders_daily"), ws.log("orders_daily"), ws.verify("orders_daily")
>>> ws.janitor(older_than="3d"), ws.compact("orders_daily")   # maintenance
>>> ws.close()                                   # or: with Workspace.open(".") as ws: ...

Every method raises ``lakepub.errors.LakepubError`` subclasses whose ``exit_code`` is the CLI's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from lakepub import duck, logs, positions
from lakepub.contract.model import Contract
from lakepub.config import DatasetSpec, WorkspaceConfig, open_config
from lakepub.errors import ConfigError, InvalidPosition, QueryError
from lakepub.contract.validate import events_from_arrow, events_from_records, read_events
from lakepub.failures import classified
from lakepub.landing import LandingSource
from lakepub.positions import Vector
from lakepub.publish import dual
from lakepub.publish.publisher import Publisher, PublishResult, prepare
from lakepub.publish.read_ahead import ReadAhead
from lakepub.store.catalog import open_catalog
from lakepub.store.commit import deferred_cleanup
from lakepub.store.integrity import check_scannable
from lakepub.store import s3
from lakepub.store.layout import ledger_id, summary_id
from lakepub.store.record import latest_record

if TYPE_CHECKING:
    from lakepub.contract.consumers import ObservedConnection
    from lakepub.maintenance.compact import CompactionResult
    from lakepub.maintenance.janitor import JanitorReport
    from lakepub.lifecycle.retirement import RetireResult
    from lakepub.lifecycle.state import DatasetState
    from lakepub.store.cache import FileCache
    from lakepub.reports import DatasetStatus, LogEntry, VerifyReport
    from lakepub.views import Resolution

EventsInput = str | Path | pa.Table | Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class RunResult:
    """What ``Workspace.run`` published: one ``PublishResult`` per batch, and the source's
    position before and after (``landing``: the folder read)."""

    dataset: str
    source: str
    landing: str
    batches: list[PublishResult] = field(default_factory=list)
    start: Vector = field(default_factory=dict)
    end: Vector = field(default_factory=dict)
    skipped: str | None = None  # why nothing was read (a retired dataset: lakepub/lifecycle/retirement.py)

    @property
    def events(self) -> int:
        """Events published over all batches."""
        return sum(b.counts.events for b in self.batches)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub run --format json``)."""
        return {
            "dataset": self.dataset, "source": self.source, "landing": self.landing,
            "start": self.start, "end": self.end, "events": self.events,
            "batches": [b.as_dict() for b in self.batches], "skipped": self.skipped,
        }


class Workspace:
    """A workspace (``lakepub.yaml``, its catalog and datasets): publish, run, read, maintain.

    Usable as a context manager: ``with Workspace.open(".") as ws: ...`` closes what it opened
    (its publishers' DuckDB connections and the SQL catalog's database engine) on exit;
    connections returned by ``connect()`` belong to the caller (``with ws.connect() as con``).
    """

    def __init__(self, config: WorkspaceConfig, *, prefetched: LandingSource | None = None):
        """``prefetched``: a landing source reading on a thread (``LandingSource.prefetch``, by
        ``lakepub run`` before this module is imported), used by a ``run`` of its folder."""
        self.config = config
        self._publishers: dict[str, Publisher] = {}
        self._prefetched = prefetched

    @classmethod
    def open(cls, path: str | Path = ".", *, search_parents: bool = True) -> "Workspace":
        """The workspace holding ``path`` (its folder or a parent, unless ``search_parents=False``);
        ConfigError (exit 2) when there is none."""
        return cls(open_config(path, search_parents=search_parents))

    @classmethod
    def init(cls, folder: str | Path, *, force: bool = False) -> "Workspace":
        """Create a workspace in ``folder`` (what ``lakepub init`` writes) and open it."""
        from lakepub.init import init_workspace

        init_workspace(Path(folder), force=force)
        return cls.open(folder, search_parents=False)

    def close(self) -> None:
        """Close what this workspace opened: its publishers' DuckDB connections and the catalog's
        database engine (SQL catalogs). The workspace reopens them if it is used again."""
        publishers, self._publishers = self._publishers, {}
        for publisher in publishers.values():
            publisher.close()
        catalog = self.__dict__.pop("catalog", None)
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog of ``lakepub.yaml`` (opened on first use)."""
        return open_catalog(self.config.catalog_name, self.config.catalog_properties(), cache=self.file_cache)

    @cached_property
    def file_cache(self) -> "FileCache":
        """The local cache of an object-store warehouse's key index (``cache:`` in lakepub.yaml)."""
        from lakepub.store.cache import FileCache

        return FileCache(self.config.cache_dir, self.config.cache_limit_mb << 20)

    def dataset(self, name: str) -> DatasetSpec:
        """The definition of dataset ``name``; UnknownDataset (exit 2) if there is none."""
        return self.config.dataset(name)

    def publisher(self, dataset: str) -> Publisher:
        """The publisher of ``dataset``'s entity (shared by every dataset of it)."""
        group = self.config.group(dataset)
        if group.name not in self._publishers:
            self._publishers[group.name] = Publisher(
                self.catalog, self.config.namespace, group, lambda: duck.connect(self.config.catalog),
                mode=self.config.commit, key_index=self.config.key_index, cache=self.file_cache,
            )
        return self._publishers[group.name]

    # --- writing ---------------------------------------------------------------------------

    @classified
    def publish(self, dataset: str, events: EventsInput, *, source: str | None = None,
                start: Mapping[str, int] | str, end: Mapping[str, int] | str) -> PublishResult:
        """Publish one batch; returns the snapshot id, batch identity and counts.

        ``events``: a JSONL or Parquet file (``"-"``: standard input), an Arrow table or dicts;
        all are validated before the catalog is touched. ``source=None`` is the dataset's source.
        """
        spec = self.dataset(dataset)
        s3.head_start(self.config.catalog_properties())  # an S3 warehouse: pool threads, imports (store/s3_warm.py)
        source = spec.source if source is None else positions.check_name(source, "source")
        start_v = positions.parse_vector(start, "start")
        end_v = positions.parse_vector(end, "end")
        covered = positions.check_range(start_v, end_v)
        if not isinstance(events, (str, Path, pa.Table)):  # records: read once more under a DUAL_WRITE version
            events = list(events)
        table = _events_table(events, spec.contract)  # read and validated before anything touches the catalog
        _refuse_deleted_definition(spec, dataset)
        _refuse_retired(self._summary_table(dataset), dataset, "publishing into it")
        if isinstance(events, (str, Path)) and table.num_rows != covered:
            name = "<stdin>" if str(events) == "-" else str(events)
            raise InvalidPosition(f"{name} has {table.num_rows} events but the range {positions.dumps(start_v)} -> "
                                  f"{positions.dumps(end_v)} covers {covered}")
        publisher = self.publisher(dataset)
        with dual.explicit(self, publisher, spec, events):  # DUAL_WRITE: the batch read again for the new version
            return publisher.publish(table, source=source, start=start_v, end=end_v, dataset=dataset)

    @classified
    def run(self, dataset: str, *, landing: str | Path | None = None, max_batch: int = 100_000,
            on_batch: Callable[[PublishResult, int], None] | None = None,
            on_start: Callable[[int], None] | None = None,
            stop: Callable[[], bool] | None = None) -> RunResult:
        """Publish everything the landing source holds past the committed position, batch by batch.

        ``on_start(pending_records)`` and ``on_batch(result, pending_after)`` report progress;
        ``stop()`` is asked before each batch and True ends the run there (``run --follow``
        stops on SIGTERM this way: never within a batch's publish; its version hints go up later)."""
        spec = self.dataset(dataset)
        _refuse_deleted_definition(spec, dataset)
        retired = _retirement(self._summary_table(dataset))
        if retired is not None:  # like a disabled dbt model: skipped, not an error (nothing is read)
            return RunResult(dataset, spec.source, "", skipped=f"{dataset} is retired since {retired}; skipped "
                             f"(nothing read or published; 'lakepub restore {dataset}' to run it again)")
        folder = self.config.landing_dir(spec.source, Path(landing) if landing else None)
        src, self._prefetched = self._prefetched, None
        if src is None or src.folder != folder or src.contract is not spec.contract:
            src = LandingSource(folder, spec.contract)
        if not src.exists():
            raise ConfigError(f"landing folder {src.folder} does not exist (it holds one folder per source "
                              "partition, each with JSONL segments read in file-name order)")
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-count") as pool:
            counting = pool.submit(src.count_all)  # segments are counted (numpy) while the catalog opens
            committed = self.committed_positions(dataset).get(spec.source, {})
            counting.result()
        pending = src.backlog(committed).total_pending
        logs.run_started(dataset, spec.source, str(src.folder), committed, pending)
        if on_start:
            on_start(pending)
        results: list[PublishResult] = []
        position = dict(committed)
        # The first batch is read while the publisher opens (or creates) the dataset's tables;
        # deferred_cleanup: a batch's version hints are written while the next one starts (all
        # of them before this returns).
        contract = spec.contract
        with deferred_cleanup(), ReadAhead(src.batches(committed, max_batch), lambda t: prepare(t, contract)) as batches:
            publisher = self.publisher(dataset)
            publisher.catch_up()  # a dataset added to an entity with history is built first
            dual.attach(self, publisher, spec, Path(landing) if landing else None, max_batch)  # DUAL_WRITE
            for batch, start, end in batches:
                if stop is not None and stop():
                    break
                result = publisher.publish(batch, source=spec.source, start=start, end=end, dataset=dataset)
                results.append(result)
                position = end
                pending -= batch.events.num_rows
                if on_batch:
                    on_batch(result, pending)
        outcome = RunResult(dataset, spec.source, str(src.folder), results,
                            positions.normalize(committed), positions.normalize(position))
        logs.run_done(outcome)
        return outcome

    # --- reading ---------------------------------------------------------------------------

    @classified
    def status(self, dataset: str, *, landing: str | None = None) -> "DatasetStatus":
        """What ``lakepub status DATASET`` shows, as a dataclass (``.as_dict()`` for JSON)."""
        from lakepub import reports  # on use: reports load DuckDB and the landing scanner

        return reports.status(self, dataset, landing=landing)

    @classified
    def log(self, dataset: str, limit: int | None = None) -> list["LogEntry"]:
        """Publish history, newest first (``lakepub log``)."""
        from lakepub import reports

        return reports.log(self, dataset, limit)

    @classified
    def verify(self, dataset: str, *, deep: bool = False) -> "VerifyReport":
        """Recompute partition checksums (and with ``deep`` the whole table from the ledger)."""
        from lakepub import reports

        return reports.verify(self, dataset, deep=deep)

    # --- maintenance -----------------------------------------------------------------------

    @classified
    def janitor(self, datasets: Iterable[str] = (), *, older_than: str | float = "3d", retain_last: int | None = None,
                dry_run: bool = False) -> "JanitorReport":
        """Expire old snapshots and delete unreferenced files (``lakepub janitor``): of the named
        datasets' tables and ledgers, or of every table (the audit table included) when none are
        named. ``older_than``: a duration (``"0s"``, ``"90m"``, ``"3d"``) or seconds."""
        from lakepub.maintenance.durations import parse_duration
        from lakepub.maintenance.expiry import DEFAULT_RETAIN_LAST
        from lakepub.maintenance.janitor import JanitorOptions, run_janitor

        seconds = parse_duration(older_than) if isinstance(older_than, str) else float(older_than)
        options = JanitorOptions(older_than_s=seconds, dry_run=dry_run,
                                 retain_last=DEFAULT_RETAIN_LAST if retain_last is None else retain_last)
        return run_janitor(self, list(datasets), options)

    @classified
    def compact(self, dataset: str, *, dry_run: bool = False) -> "CompactionResult":
        """Compact the ledger of ``dataset``'s entity (``lakepub compact``): one row per entity
        with a durable version floor, committed with a published snapshot that names it."""
        from lakepub.maintenance.compact import compact_ledger

        return compact_ledger(self, dataset, dry_run=dry_run)

    def committed_positions(self, dataset: str) -> dict[str, Vector]:
        """The positions of ``dataset``'s entity (its datasets are published together; one added
        later is built at theirs)."""
        group = self.config.group(dataset)
        records = [r for spec in group.datasets
                   if (t := self._summary_table(spec.name)) is not None and (r := latest_record(t)) is not None]
        if not records:
            return {}
        if len(records) == 1:
            return records[0].positions
        # A dataset left out of the catalog for a while lags behind: the newest record counts.
        ledger = self.catalog.load_table(ledger_id(self.config.namespace, group.name))

        def age(record) -> int:
            snapshot = ledger.snapshot_by_id(record.ledger_snapshot) if record.ledger_snapshot is not None else None
            return snapshot.sequence_number if snapshot is not None else -1

        return max(records, key=age).positions

    def published_tables(self) -> dict[str, str]:
        """{dataset: metadata location} of every dataset that has been published."""
        out = {}
        for name in sorted(self.config.datasets):
            table = self._summary_table(name)
            if table is not None and table.metadata.current_snapshot_id is not None and _retirement(table) is None:
                check_scannable(table)  # before DuckDB reads it: a bad manifest would abort the process
                out[name] = table.metadata_location
        return out

    @classified
    def connect(self) -> "ObservedConnection":
        """A DuckDB connection with a view per published dataset, pinned to its published snapshot.

        Each view reads the data files of the published snapshot as Parquet, columns mapped by
        Iceberg field id (``lakepub.views``: resolved once per published snapshot, so queries pay
        no Iceberg planning), or is an ``iceberg_scan`` of it where that would not be exact
        (delete files). A ``DuckDBPyConnection`` whose ``execute``/``sql``/``query`` statements are
        recorded (``lakepub consumers``; everything else is forwarded as is). Unrestricted, for
        Python code that owns the process: it can read and write any file
        (``COPY ... TO``), ATTACH and load extensions, like any DuckDB connection, and nothing stops
        it from overwriting the warehouse's files. Run SQL you did not write through ``query``,
        which is sandboxed.
        """
        from lakepub.contract.consumers import ObservedConnection

        con = duck.connect(self.config.catalog)
        views = self.published_views()
        for name, resolution in views.items():
            con.execute(resolution.view_sql(name))
        published = {name: r.metadata_location for name, r in views.items()}
        return ObservedConnection(con, self.config.root, published)  # records the columns read

    def published_views(self) -> "dict[str, Resolution]":
        """{dataset: how its view reads the published snapshot} (``lakepub.views.Resolution``)."""
        from lakepub import views

        cache = self.config.root / ".lakepub" / "views"
        out = {}
        for name in sorted([*self.config.datasets, *self.config.derived]):  # derived: lakepub reconcile's
            table = self._summary_table(name)
            if table is not None and table.metadata.current_snapshot_id is not None and _retirement(table) is None:
                out[name] = views.resolve(table, cache)  # a retired dataset has no view
        out.update(dual.partner_views(self, cache))  # DUAL_WRITE: the new major version beside the published one
        return out

    @classified
    def query(self, sql: str) -> pa.Table:
        """Run read-only SQL over the published datasets (what ``lakepub query`` runs).

        Sandboxed (``duck.sandboxed``): only SELECT statements and EXPLAIN of one are accepted, and
        the database can read only the tables' folders in the warehouse (no other file, no
        writes, no ATTACH, INSTALL, LOAD or SET). Anything else raises QueryError (exit 2). The
        views are those of ``connect``.
        """
        import duckdb  # on use: a publish (`lakepub run`) never loads it on the key-index path

        views = self.published_views()
        published = {name: r.metadata_location for name, r in views.items()}
        folders = duck.sandbox_directories(self.config.catalog.get("warehouse"), published.values())
        con = duck.sandboxed(self.config.catalog, folders)
        try:
            duck.check_read_only(con, sql)
            for name, resolution in views.items():
                con.execute(resolution.view_sql(name))
            result = con.execute(sql).to_arrow_table()
        except duckdb.Error as exc:
            message = " ".join(str(exc).split())
            named = set(re.findall(r"[A-Za-z0-9_]+", message))  # whole names: 'orders' is not in 'orders_daily'
            unpublished = [n for n in self.config.datasets if n not in published and n in named]
            waiting = [n for n in self.config.derived if n not in published and n in named]
            missing = unpublished or waiting
            if isinstance(exc, duckdb.CatalogException) and missing and (
                    when := _retirement(self._summary_table(missing[0]))) is not None:
                raise QueryError(f"dataset '{missing[0]}' is retired since {when} and hidden from queries; "
                                 f"run 'lakepub restore {missing[0]}' to read it again") from None
            if isinstance(exc, duckdb.CatalogException) and waiting and not unpublished:
                raise QueryError(f"derived dataset '{waiting[0]}' has not been computed yet; "
                                 f"run 'lakepub reconcile {waiting[0]}' first") from None
            if isinstance(exc, duckdb.CatalogException) and unpublished:
                raise QueryError(f"dataset '{unpublished[0]}' has no published snapshot yet; "
                                 f"run 'lakepub run {unpublished[0]}' or 'lakepub publish' first") from None
            raise QueryError(f"query failed: {message}") from None
        else:  # `lakepub consumers DATASET` shows what was read; recording never fails the query
            from lakepub.contract import consumers

            consumers.observe_connection(con, self.config.root, sql, published, "query")
            return result
        finally:
            con.close()

    @classified
    def state(self, dataset: str) -> "DatasetState":
        """What ``lakepub state DATASET`` shows (``lakepub.lifecycle.state``; ``.as_dict()``: its
        versioned JSON): data version, fingerprint, partitions, positions, last publish, readiness."""
        from lakepub.lifecycle.state import dataset_state

        return dataset_state(self, dataset)

    @classified
    def wait(self, dataset: str, *, partition: str | None = None, data_version: str | None = None,
             timeout: str | float = "30m", interval: str | float = "5s") -> "DatasetState":
        """Block until ``dataset`` (its ``partition``) is published (at ``data_version``); raises
        WaitTimedOut (exit 6) after ``timeout`` (a duration or seconds). ``lakepub wait``."""
        from lakepub.lifecycle.sensor import wait_for
        from lakepub.maintenance.durations import parse_duration

        def seconds(value: str | float, option: str) -> float:
            return parse_duration(value, option) if isinstance(value, str) else float(value)

        return wait_for(self, dataset, partition=partition, data_version=data_version,
                        timeout_s=seconds(timeout, "--timeout"), interval_s=seconds(interval, "--interval"))

    @classified
    def retire(self, dataset: str, *, grace: str | float = "7d") -> "RetireResult":
        """Soft-delete ``dataset`` (``lakepub retire``): hidden from views and listings, skipped by
        ``run``, hard-deleted by the janitor after ``grace``; no data is removed."""
        from lakepub.lifecycle.retirement import retire
        from lakepub.maintenance.durations import parse_duration

        return retire(self, dataset, grace_s=parse_duration(grace, "--grace") if isinstance(grace, str) else float(grace))

    @classified
    def restore(self, dataset: str) -> "RetireResult":
        """Undo ``retire`` (``lakepub restore``)."""
        from lakepub.lifecycle.retirement import restore

        return restore(self, dataset)

    def _summary_table(self, dataset: str):
        if dataset not in self.config.derived:
            self.dataset(dataset)
        try:
            return self.catalog.load_table(summary_id(self.config.namespace, dataset))
        except NoSuchTableError:
            return None


def _retirement(table) -> str | None:
    """When ``table``'s dataset was retired (ISO 8601), or None (``lakepub.lifecycle.retirement``)."""
    from lakepub.lifecycle.retirement import iso, retirement_of

    found = retirement_of(table)
    return iso(found.at_ms) if found is not None else None


def _refuse_deleted_definition(spec, dataset: str) -> None:
    """A long-lived Workspace (``run --follow``, an embedding service) holds the definitions it was
    opened with; the janitor's hard delete removes a retired dataset's YAML, then drops its tables,
    and a publish past that would create them again (a run: republishing the landing folder)."""
    if spec.path is not None and not spec.path.exists():
        raise ConfigError(f"{spec.path}: the definition of dataset '{dataset}' was deleted after this process "
                          "loaded it (the janitor hard-deletes retired datasets); nothing was published. "
                          f"Stop following it, or restore the file to publish '{dataset}' again")


def _refuse_retired(table, dataset: str, doing: str) -> None:
    from lakepub.lifecycle.retirement import check_not_retired

    check_not_retired(table, dataset, doing)


def _events_table(events: EventsInput, contract: Contract) -> pa.Table:
    if isinstance(events, pa.Table):
        return events_from_arrow(events, contract)
    if isinstance(events, (str, Path)):
        return read_events(events, contract)  # "-" is standard input
    return events_from_records(events, contract)

