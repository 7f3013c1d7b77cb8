"""The Python API: a workspace facade used by the CLI, scripts and schedulers.

>>> ws = Workspace.open(".")
>>> result = ws.publish("orders_daily", "batch.jsonl", source="orders", start={"p0": 0}, end={"p0": 4})
>>> ws.run("orders_daily")                       # drain the landing folder
>>> ws.connect().sql("SELECT * FROM orders_daily ORDER BY day").fetchall()
>>> ws.status("orders_daily"), ws.log("orders_daily"), ws.verify("orders_daily")

Every method raises ``lakepub.errors.LakepubError`` subclasses whose ``exit_code`` is the CLI's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from lakepub import duck, positions
from lakepub.contract.model import Contract
from lakepub.config import CONFIG_FILE, DatasetSpec, WorkspaceConfig, find_root, load_workspace
from lakepub.errors import ConfigError, InvalidPosition, QueryError
from lakepub.contract.validate import events_from_arrow, events_from_records, read_events
from lakepub.failures import classified
from lakepub.landing import LandingSource
from lakepub.positions import Vector
from lakepub.publish.publisher import PreparedBatch, Publisher, PublishResult, prepare
from lakepub.store.catalog import open_catalog
from lakepub.store.integrity import check_scannable
from lakepub.store.layout import ledger_id, summary_id
from lakepub.store.record import latest_record

if TYPE_CHECKING:
    from lakepub.contract.consumers import ObservedConnection
    from lakepub.reports import DatasetStatus, LogEntry, VerifyReport

EventsInput = str | Path | pa.Table | Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class RunResult:
    dataset: str
    source: str
    landing: str
    batches: list[PublishResult] = field(default_factory=list)
    start: Vector = field(default_factory=dict)
    end: Vector = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(b.counts.events for b in self.batches)

    def as_dict(self) -> dict[str, object]:
        return {
            "dataset": self.dataset, "source": self.source, "landing": self.landing,
            "start": self.start, "end": self.end, "events": self.events,
            "batches": [b.as_dict() for b in self.batches],
        }


class Workspace:
    def __init__(self, config: WorkspaceConfig):
        self.config = config
        self._publishers: dict[str, Publisher] = {}

    @classmethod
    def open(cls, path: str | Path = ".", *, search_parents: bool = True) -> "Workspace":
        path = Path(path)
        root = find_root(path) if search_parents else path.resolve()
        if not (root / CONFIG_FILE).is_file():
            raise ConfigError(f"{root / CONFIG_FILE} not found; run 'lakepub init' first")
        return cls(load_workspace(root))

    @cached_property
    def catalog(self) -> Catalog:
        return open_catalog(self.config.catalog_name, self.config.catalog_properties())

    def dataset(self, name: str) -> DatasetSpec:
        return self.config.dataset(name)

    def publisher(self, dataset: str) -> Publisher:
        """The publisher of ``dataset``'s entity (shared by every dataset of it)."""
        group = self.config.group(dataset)
        if group.name not in self._publishers:
            self._publishers[group.name] = Publisher(
                self.catalog, self.config.namespace, group, lambda: duck.connect(self.config.catalog),
                mode=self.config.commit, key_index=self.config.key_index,
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
        source = spec.source if source is None else positions.check_name(source, "source")
        start_v = positions.parse_vector(start, "start")
        end_v = positions.parse_vector(end, "end")
        covered = positions.check_range(start_v, end_v)
        table = _events_table(events, spec.contract)  # read and validated before anything touches the catalog
        if isinstance(events, (str, Path)) and table.num_rows != covered:
            name = "<stdin>" if str(events) == "-" else str(events)
            raise InvalidPosition(f"{name} has {table.num_rows} events but the range {positions.dumps(start_v)} -> "
                                  f"{positions.dumps(end_v)} covers {covered}")
        return self.publisher(dataset).publish(table, source=source, start=start_v, end=end_v, dataset=dataset)

    @classified
    def run(self, dataset: str, *, landing: str | Path | None = None, max_batch: int = 100_000,
            on_batch: Callable[[PublishResult, int], None] | None = None,
            on_start: Callable[[int], None] | None = None) -> RunResult:
        """Publish everything the landing source holds past the committed position, batch by batch.

        ``on_start(pending_records)`` and ``on_batch(result, pending_after)`` report progress.
        """
        spec = self.dataset(dataset)
        src = LandingSource(self.config.landing_dir(spec.source, Path(landing) if landing else None), spec.contract)
        if not src.exists():
            raise ConfigError(f"landing folder {src.folder} does not exist (it holds one folder per source "
                              "partition, each with JSONL segments read in file-name order)")
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-count") as pool:
            counting = pool.submit(src.count_all)  # segments are counted (numpy) while the catalog opens
            committed = self.committed_positions(dataset).get(spec.source, {})
            counting.result()
        pending = src.backlog(committed).total_pending
        if on_start:
            on_start(pending)
        results: list[PublishResult] = []
        position = dict(committed)
        # The first batch is read while the publisher opens (or creates) the dataset's tables.
        contract = spec.contract
        with _ReadAhead(src.batches(committed, max_batch), lambda t: prepare(t, contract)) as batches:
            publisher = self.publisher(dataset)
            publisher.catch_up()  # a dataset added to an entity with history is built first
            for batch, start, end in batches:
                result = publisher.publish(batch, source=spec.source, start=start, end=end, dataset=dataset)
                results.append(result)
                position = end
                pending -= batch.events.num_rows
                if on_batch:
                    on_batch(result, pending)
        return RunResult(dataset, spec.source, str(src.folder), results,
                         positions.normalize(committed), positions.normalize(position))

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
            if table is not None and table.metadata.current_snapshot_id is not None:
                check_scannable(table)  # before DuckDB reads it: a bad manifest would abort the process
                out[name] = table.metadata_location
        return out

    @classified
    def connect(self) -> "ObservedConnection":
        """A DuckDB connection with a view per published dataset, pinned to its published snapshot.

        A ``DuckDBPyConnection`` whose ``execute``/``sql``/``query`` statements are recorded
        (``lakepub consumers``; everything else is forwarded as is). Unrestricted, for Python code
        that owns the process: it can read and write any file
        (``COPY ... TO``), ATTACH and load extensions, like any DuckDB connection, and nothing stops
        it from overwriting the warehouse's files. Run SQL you did not write through ``query``,
        which is sandboxed.
        """
        from lakepub.contract.consumers import ObservedConnection

        con = duck.connect(self.config.catalog)
        published = self.published_tables()
        for name, location in published.items():
            con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM {duck.scan_sql(location)}')
        return ObservedConnection(con, self.config.root, published)  # records the columns read

    @classified
    def query(self, sql: str) -> pa.Table:
        """Run read-only SQL over the published datasets (what ``lakepub query`` runs).

        Sandboxed (``duck.sandboxed``): only SELECT statements and EXPLAIN of one are accepted, and
        the database can read only the tables' folders in the warehouse (no other file, no
        writes, no ATTACH, INSTALL, LOAD or SET). Anything else raises QueryError (exit 2).
        """
        import duckdb  # on use: a publish (`lakepub run`) never loads it on the key-index path

        published = self.published_tables()
        folders = duck.sandbox_directories(self.config.catalog.get("warehouse"), published.values())
        con = duck.sandboxed(self.config.catalog, folders)
        try:
            duck.check_read_only(con, sql)
            for name, location in published.items():
                con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM {duck.scan_sql(location)}')
            result = con.execute(sql).to_arrow_table()
        except duckdb.Error as exc:
            message = " ".join(str(exc).split())
            unpublished = [n for n in self.config.datasets if n not in published and n in message]
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

    def _summary_table(self, dataset: str):
        self.dataset(dataset)
        try:
            return self.catalog.load_table(summary_id(self.config.namespace, dataset))
        except NoSuchTableError:
            return None


def _events_table(events: EventsInput, contract: Contract) -> pa.Table:
    if isinstance(events, pa.Table):
        return events_from_arrow(events, contract)
    if isinstance(events, (str, Path)):
        return read_events(events, contract)  # "-" is standard input
    return events_from_records(events, contract)


class _ReadAhead:
    """Read, validate and prepare the next batch in a background thread while the current one publishes.

    pyarrow's JSON reader and sort release the GIL, so on two cores the read overlaps the publish.
    Only one batch is read ahead (the first as soon as this is created); an invalid event still
    surfaces right after the batches before it.
    """

    def __init__(self, batches: Iterator[tuple[pa.Table, Vector, Vector]],
                 prepare: Callable[[pa.Table], PreparedBatch]):
        self._batches, self._prepare = batches, prepare
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-read")
        self._ahead = self._pool.submit(self._read)

    def _read(self) -> tuple[PreparedBatch, Vector, Vector] | None:
        item = next(self._batches, None)
        return None if item is None else (self._prepare(item[0]), item[1], item[2])

    def __iter__(self) -> Iterator[tuple[PreparedBatch, Vector, Vector]]:
        while (item := self._ahead.result()) is not None:
            self._ahead = self._pool.submit(self._read)
            yield item

    def __enter__(self) -> "_ReadAhead":
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
