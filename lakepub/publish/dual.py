"""DUAL_WRITE: a breaking (major) contract version built beside the published one, then published
with it, both in ONE atomic catalog commit per batch.

A contract version whose file says ``status: DUAL_WRITE`` and whose major version is above the
one an entity's datasets name (``customers@v2.0`` beside datasets on ``customers@v1.0``) is the
entity's **dual-write partner**: its own entity ``<entity>__v<MAJOR>`` (own ledger
``<entity>__v<MAJOR>__ledger``: it holds the entities' state under the new contract, whose types
the old ledger cannot hold) and one table per dataset, ``<dataset>__v<MAJOR>``, with the same
projection and partitioning re-derived against the new contract (a projection column the new
version removed is refused naming the dataset file). The new version reads the same landing
records as the old one, each batch's range read again and validated under the new contract (so a
narrowed type is checked value by value: a record the new version refuses refuses the batch for
both, exit 2, and nothing is published).

``lakepub run DATASET`` while a partner exists:

1. **build beside**: the partner's tables are published from the landing, from their own
   position up to the old version's committed position, in commits of their own (the old
   version's readers see nothing: no table of theirs moves). Resumable: the partner's position
   is recorded on its tables like any dataset's.
2. **dual write**: every later batch stages the partner's ledger and tables (projected against
   the partner's ledger, written, snapshots staged; in one background thread, while the old
   version's side is written) and adds them to the old version's commit:
   ``commit_atomically`` swaps every pointer in one database transaction asserting each parent,
   so a crash before it leaves neither version moved and a crash after it leaves both; a lost
   race retries both. The partner must be exactly at the batch's start (it is after step 1);
   past it, another run's dual commit landed: a lost race, retried (the retry finds the batch
   published); behind it, the publish is refused with exit 4 (the next run builds it up first).
   Concurrent runs are safe in both steps: the build reads the partner's position before the old
   version's (the partner is never ahead at any instant) and starts again from the partner's
   new position when another run moved it.

After the DEFAULT swap (``contract/dual_write.py``), a process still holding dataset files that
name the old version is refused at its next run or publish (``_refuse_swapped``), and a batch
whose partner tables vanished under it (renamed by the swap) is refused: neither publishes the
old version's rows into the swapped-in tables.

Invariant: while the partner exists, the old version's tables and the partner's tables record
the same positions after every commit of a run (``contract promote --to DEFAULT`` checks it
before swapping). Cost: the landing range is read and validated a second time, the batch
projected, written and staged twice; the commit holds twice the tables. The dual-write commit
needs a SQL catalog's atomic commit (ordered mode is refused).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from lakepub.errors import BlockedError, ConfigError, RetryableError

if TYPE_CHECKING:
    import pyarrow as pa

    from lakepub.config import EntityGroup, WorkspaceConfig
    from lakepub.contract.model import Contract
    from lakepub.identity import BatchIdentity
    from lakepub.positions import Vector

DUAL_WRITE = "DUAL_WRITE"
_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-dual")
_STATUS = re.compile(r"^status:[ \t]*[\"']?DUAL_WRITE\b", re.MULTILINE)


class PartnerBehind(RetryableError):
    """The new version's tables are not at the batch's start (exit 4: retry builds it up first)."""


@dataclass
class Deferred:
    """A publish attempt written and staged, not committed: its ``changes`` go into another
    publisher's commit; ``done()`` once that commit landed."""

    changes: list
    done: Callable[[], Any]


def major(contract: Contract) -> int:
    head = str(contract.version).split(".")[0]
    return int(head) if head.isdigit() else 0


def suffix(contract: Contract) -> str:
    """The names of a version's tables beside the published ones: ``__v<MAJOR>``."""
    return f"__v{major(contract)}"


def partner_contract(config: WorkspaceConfig, contract: Contract) -> Contract | None:
    """The newest version of ``contract``'s name with a higher major version in DUAL_WRITE (None:
    no dual write). Only files whose text says ``status: DUAL_WRITE`` are parsed (a few stats and
    reads on every run)."""
    folder = config.root / config.catalog_dir / "contracts"
    if not folder.is_dir():
        return None
    from lakepub.contract.model import load_contract

    found = []
    for path in sorted(folder.glob("*.yaml")):  # any file name: contracts are found by content
        if not _STATUS.search(path.read_text()):
            continue
        candidate = load_contract(path)
        if candidate.name == contract.name and (candidate.terms.status or "") == DUAL_WRITE \
                and major(candidate) > major(contract):
            found.append(candidate)
    return max(found, key=lambda c: tuple(int(p) if p.isdigit() else 0 for p in str(c.version).split("."))) \
        if found else None


def partner_group(group: EntityGroup, new: Contract) -> EntityGroup:
    """The new version's entity: ``<entity>__v<MAJOR>`` with ``<dataset>__v<MAJOR>`` datasets, each
    with its YAML's projection and partition re-derived against ``new``. The datasets keep the
    old entity name in their recorded definition: after the swap to DEFAULT they are that
    entity's tables, and their definition must be the one the YAML then says."""
    from lakepub.config import EntityGroup, entity_of
    from lakepub.projection.base import kind_of

    tail = suffix(new)
    specs = []
    for spec in group.datasets:
        doc = _dataset_document(spec)
        definition = {k: doc[k] for k in ("projection", "partition") if doc.get(k) is not None}
        kind = kind_of(definition, entity_of(new), where=f"{spec.path} (under {new.schema_ref})",
                       dataset=spec.name + tail) if definition else spec.kind
        specs.append(replace(spec, name=spec.name + tail, contract=new, kind=kind))
    return EntityGroup(group.name + tail, group.source, new, tuple(specs))


def _dataset_document(spec: Any) -> dict[str, Any]:
    import yaml

    if spec.path is None:
        return {}
    for doc in yaml.safe_load_all(Path(spec.path).read_text()):
        if isinstance(doc, dict) and doc.get("name") == spec.name:
            return doc
    return {}


class Companion:
    """The dual-write partner of a publisher: the new version's publisher, and the landing it
    reads each batch's range from again under the new contract."""

    def __init__(self, publisher: Any, landing_folder: Path):
        from lakepub.landing import LandingSource

        self.publisher = publisher
        self.landing = LandingSource(landing_folder, publisher.contract)
        self.events: pa.Table | None = None  # an explicit batch's events (Workspace.publish), else the landing's
        self._pending: Future | None = None  # the staging begun for the current attempt

    # --- 1. build beside ----------------------------------------------------------------------

    def position(self, source: str) -> Vector:
        pub = self.publisher
        ledger, _, latest = pub.load()
        checkpoint = pub.checkpoint(ledger, latest)
        return dict(checkpoint[1].positions.get(source, {})) if checkpoint else {}

    def build(self, source: str, target: Callable[[], Vector], max_batch: int) -> int:
        """Publish the landing from the partner's position up to ``target()`` (the old version's);
        returns the batches published. The partner's position is read before the old one's: it
        is never ahead of it at any instant, so seen ahead it was moved outside lakepub. Another
        run building or dual-writing meanwhile makes a batch stale: positions are read again."""
        from lakepub import positions
        from lakepub.errors import StaleStart

        pub = self.publisher
        pub.catch_up()
        done = 0
        for _ in range(pub.max_attempts):
            have = self.position(source)
            goal = target()
            ahead = {p: n for p, n in have.items() if n > goal.get(p, 0)}
            if ahead:
                raise BlockedError(
                    f"the {pub.contract.schema_ref} tables of entity '{pub.group.name}' are ahead of the published "
                    f"version ({positions.dumps(have)} vs {positions.dumps(goal)}); they were moved outside a "
                    f"dual-write run: drop the {pub.group.name} tables to build them again; nothing was published")
            if positions.same_position(have, goal):
                return done
            if not self.landing.exists():
                raise BlockedError(f"the {pub.contract.schema_ref} version is built from the landing, and "
                                   f"{self.landing.folder} does not exist; nothing was published")
            try:
                for batch, start, end in self.landing.batches(have, max_batch, until=goal):
                    pub.publish(batch, source=source, start=start, end=end, dataset=pub.group.dataset_names[0])
                    done += 1
            except StaleStart:
                continue  # another run moved the partner meanwhile: from its new position
        raise PartnerBehind(f"gave up building the {pub.contract.schema_ref} tables: other runs kept moving them; "
                            "nothing is wrong, run again")

    # --- 2. dual write ------------------------------------------------------------------------

    def begin(self, identity: BatchIdentity) -> None:
        """Start staging the batch for the partner in the background (a single thread: the
        partner's read, projection and files overlap the old version's); ``join`` waits for it.
        A previous attempt's staging that was never joined (that attempt failed) is waited for
        first, its outcome dropped: its files are orphans for the janitor."""
        self.settle()
        self._pending = _BACKGROUND.submit(self.stage, identity)

    def join(self) -> Deferred:
        pending, self._pending = self._pending, None
        if pending is None:  # pragma: no cover - begin() precedes every join()
            raise RuntimeError("dual write: join() without begin()")
        return pending.result()

    def settle(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception:  # noqa: BLE001 - the attempt it belonged to failed already
                pass

    def stage(self, identity: BatchIdentity) -> Deferred:
        """Project, write and stage this batch for the partner (its events read again under the
        new contract); the caller commits the changes with its own."""
        from pyiceberg.exceptions import NoSuchTableError

        from lakepub import positions
        from lakepub.identity import BatchIdentity
        from lakepub.publish import evolution, gating
        from lakepub.publish.versioning import project
        from lakepub.store.layout import order_keys_version

        pub = self.publisher
        raw = self.events if self.events is not None else self._read(identity.start, identity.end)
        if raw.num_rows != positions.check_range(identity.start, identity.end):  # never a partial batch
            from lakepub.errors import InvalidPosition

            raise InvalidPosition(f"the batch read again for {pub.contract.schema_ref} has {raw.num_rows} events, "
                                  f"its range {positions.dumps(identity.start)} -> {positions.dumps(identity.end)} "
                                  "covers another number; nothing was published")
        original = pub.prepare(raw)
        mine = BatchIdentity(pub.group.name, identity.source, identity.start, identity.end, original.digest)
        try:
            ledger, tables, latest = pub.load()
        except NoSuchTableError as exc:  # promote --to DEFAULT swapped it in (and renamed it) meanwhile
            raise BlockedError(f"the {pub.contract.schema_ref} tables were swapped in while this run published "
                               f"({exc}); nothing was published by this batch: run again") from exc
        checkpoint = pub.checkpoint(ledger, latest) if not pub.stale_members(ledger, latest) else None
        previous = checkpoint[1] if checkpoint else None
        committed = (previous.positions if previous else {}).get(identity.source, {})
        if not positions.same_position(identity.start, committed):
            if all(committed.get(p, 0) >= n for p, n in identity.start.items()):
                from lakepub.store.commit import CommitConflict  # another run's dual commit landed: retry both

                raise CommitConflict(f"the {pub.group.name} tables moved past the batch's start")
            raise PartnerBehind(
                f"the {pub.contract.schema_ref} tables (dual write) are at {positions.dumps(committed)}, the batch "
                f"starts at {positions.dumps(identity.start)}; nothing was published: run 'lakepub run' again "
                "(it builds the new version up to the published position first)")
        for name, table in tables.items():  # rows read while the ledger is looked up
            pub.writers[name].prefetch(table)
        prepared, gate = original, None
        if original.verdict is not None:
            prepared, gate = gating.check(pub.catalog, pub.namespace, pub.group, lambda: pub.con, original,
                                          pub.gate_partitions)
        head = previous.ledger_snapshot if previous else None
        found = pub._lookup.rows(ledger, head, prepared.side)  # noqa: SLF001 - the publisher's own lookup
        change = project(prepared.side, found, order_keys_version(ledger), evolution.float_widened(ledger, pub.contract))
        return pub._attempt(ledger, tables, latest, previous, change, mine, 1,  # noqa: SLF001
                            pub.group.dataset_names[0], time.time(), gate, original.events.num_rows, defer=True)

    def _read(self, start: Vector, end: Vector) -> pa.Table:
        for batch, _, _ in self.landing.batches(start, 1 << 62, until=end):
            return batch
        raise ConfigError(f"{self.landing.folder}: no records between the batch's start and end")  # pragma: no cover


def attach(ws: Any, publisher: Any, spec: Any, landing_folder: Path | None, max_batch: int) -> Companion | None:
    """Before a run: find the entity's dual-write partner (None: detach any), build it up to the
    published position, and attach it so that every later commit of ``publisher`` carries it."""
    from lakepub.publish.publisher import Publisher

    group = publisher.group
    _refuse_swapped(ws, group)
    refuse_older_major(publisher)
    new = partner_contract(ws.config, group.contract)
    if new is None:
        if publisher.companion is not None:
            publisher.companion.settle()
        publisher.companion = None
        return None
    if publisher.ordered:
        raise BlockedError(f"{new.schema_ref} is in DUAL_WRITE, which publishes both versions in one atomic commit: "
                           "that needs a SQL catalog (SQLite or PostgreSQL) with commit: atomic or auto; nothing was "
                           f"published (or move {new.schema_ref} back: contract promote --to VALIDATED)")
    companion = publisher.companion
    if companion is None or companion.publisher.contract.sha256 != new.sha256:
        if companion is not None:
            companion.settle()
        partner = partner_group(group, new)
        pub = Publisher(ws.catalog, ws.config.namespace, partner, publisher._duck_factory,  # noqa: SLF001
                        mode="atomic", key_index=ws.config.key_index, cache=ws.file_cache)
        companion = Companion(pub, ws.config.landing_dir(spec.source, landing_folder))
    companion.settle()
    publisher.companion = None  # the build commits the partner alone

    def target() -> Vector:
        ledger, _, latest = publisher.load()
        checkpoint = publisher.checkpoint(ledger, latest)
        return dict(checkpoint[1].positions.get(spec.source, {})) if checkpoint else {}

    companion.build(spec.source, target, max_batch)
    publisher.companion = companion
    return companion


@contextmanager
def explicit(ws: Any, publisher: Any, spec: Any, events: Any) -> Iterator[None]:
    """Around an explicit batch's publish (``Workspace.publish``): attach the partner (built from
    the landing up to the published position first) with the batch read under its contract."""
    companion = attach(ws, publisher, spec, None, 100_000)
    if companion is not None:
        companion.events = events_for(events, companion)
    try:
        yield
    finally:
        if companion is not None:
            companion.events = None


def partner_views(ws: Any, cache: Path) -> dict[str, Any]:
    """{``<dataset>__v<MAJOR>``: its view} of every published partner table, and of every old
    version kept by a swap whose contract is not RETIRED (``lakepub query``)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakepub import views
    from lakepub.store.layout import summary_id

    out = {}
    for name in view_names(ws.config) + kept_names(ws.config):
        try:
            table = ws.catalog.load_table(summary_id(ws.config.namespace, name))
        except NoSuchTableError:
            continue
        if table.metadata.current_snapshot_id is not None:
            out[name] = views.resolve(table, cache)
    return out


def _refuse_swapped(ws: Any, group: EntityGroup) -> None:
    """Before a run: ``refuse_swapped`` if a contract file of a newer major version exists (a
    glob; one catalog look-up only then)."""
    folder = ws.config.root / ws.config.catalog_dir / "contracts"
    current = major(group.contract)
    newer = [p for p in folder.glob("*.yaml")
             if (m := file_major(p, group.contract.name)) is not None and m > current] if folder.is_dir() else []
    if newer:
        refuse_swapped(ws.catalog, ws.config.namespace, group)


def refuse_older_major(publisher: Any) -> None:
    """Refuse (exit 3) to publish under a major version below the one the entity's tables were
    last published under: dataset files naming the old version after a DEFAULT swap, read by a
    process whose workspace folder does not hold the new version's contract file (another
    machine's checkout) or once the kept ``__v<M>`` tables are dropped. Its publish would evolve
    the swapped-in tables back in place (``int`` -> ``long`` is a promotion) and write old-version
    rows into them. One load of the entity's tables (a run loads them anyway)."""
    _, _, latest = publisher.load()
    for name, found in sorted(latest.items()):
        check_major(name, found[1].contract if found is not None else None, publisher.contract, "published")


def check_major(name: str, ref: str | None, mine: Contract, doing: str) -> None:
    """BlockedError if ``ref`` (the contract ``name``'s table was last written under) is a higher
    major version of ``mine``'s contract (``refuse_older_major``; ``lakepub rebuild`` too)."""
    m = re.fullmatch(r"(.*)@v(\d+)(?:\.\d+)*", ref or "")
    if m and m.group(1) == mine.schema_ref.rsplit("@", 1)[0] and int(m.group(2)) > major(mine):
        raise BlockedError(
            f"{name} was last published under {ref}, and the dataset files this process read name "
            f"{mine.schema_ref}, an older major version (a breaking version swapped in by 'contract promote "
            f"--to DEFAULT'); nothing was {doing}: update the dataset files (and the contracts folder) to {ref}")


def refuse_swapped(catalog: Any, namespace: str, group: EntityGroup) -> None:
    """Refuse (exit 3) to publish under a version whose tables were swapped out: the catalog
    holds ``<entity>__v<its major>__ledger`` (kept by a DEFAULT swap) while the dataset files
    this process read still name that version. Also asked by ``Publisher.load`` when the
    entity's ledger has another table uuid than before (a swap during a long run)."""
    from lakepub.store.layout import ledger_id

    kept = ledger_id(namespace, group.name + suffix(group.contract))
    if catalog.table_exists(kept):
        raise BlockedError(
            f"entity '{group.name}' was swapped to a newer major version of {group.contract.name} (contract promote "
            f"--to DEFAULT kept {group.contract.schema_ref} as {kept[1]}), and the dataset files this process read "
            f"name {group.contract.schema_ref}; nothing was published: if that promotion stopped before rewriting "
            "the dataset files, run it again; otherwise run again (a new process reads the rewritten files)")


def events_for(events: Any, companion: Companion) -> pa.Table:
    """An explicit batch's events (``Workspace.publish``) validated under the new version's
    contract: read again from the same file, Arrow table or records. Standard input cannot be
    read twice: refused (exit 3) while a version is in DUAL_WRITE."""
    from lakepub.contract.validate import events_from_arrow, events_from_records, read_events

    import pyarrow as pa

    contract = companion.publisher.contract
    if isinstance(events, pa.Table):
        return events_from_arrow(events, contract)
    if isinstance(events, (str, Path)):
        if str(events) in ("-", "/dev/stdin"):
            raise BlockedError(f"{contract.schema_ref} is in DUAL_WRITE: the batch is validated under both versions, "
                               "and standard input cannot be read twice; nothing was published: write the events to "
                               "a file and publish that")
        return read_events(events, contract)
    return events_from_records(events, contract)


def view_names(config: WorkspaceConfig) -> list[str]:
    """The ``<dataset>__v<MAJOR>`` tables of every version in DUAL_WRITE: ``lakepub query`` and
    ``Workspace.connect`` give each a view beside the published one (a few file reads, no
    parsing, when no contract says DUAL_WRITE)."""
    out: list[str] = []
    seen: dict[str, Contract | None] = {}
    for name, spec in sorted(config.datasets.items()):
        key = spec.contract.schema_ref
        if key not in seen:
            seen[key] = partner_contract(config, spec.contract)
        if seen[key] is not None:
            out.append(name + suffix(seen[key]))
    return out


_FILE_MAJOR = re.compile(r"@v(\d+)(?:\.\d+)*\.yaml$")
_NAME_LINE = re.compile(r"^name:[ \t]*[\"']?([^\"'\s#]+)", re.MULTILINE)
_VERSION_LINE = re.compile(r"^version:[ \t]*[\"']?(\d+)", re.MULTILINE)


def file_major(path: Path, name: str) -> int | None:
    """The major version of contract ``name`` that ``path`` holds (None: another contract): from a
    ``<name>@v<M>...yaml`` file name, else from the file's top-level ``name:``/``version:`` lines
    (contract files may be named freely; no contract is parsed)."""
    if path.name.startswith(f"{name}@v") and (m := _FILE_MAJOR.search(path.name)):
        return int(m.group(1))
    text = path.read_text()
    named, version = _NAME_LINE.search(text), _VERSION_LINE.search(text)
    return int(version.group(1)) if named and version and named.group(1) == name else None
_RETIRED = re.compile(r"^status:[ \t]*[\"']?RETIRED\b", re.MULTILINE)


def kept_names(config: WorkspaceConfig) -> list[str]:
    """``<dataset>__v<M>`` for every contract file of a dataset's contract name with a lower
    major version M that is not RETIRED: the old version a DEFAULT swap kept, readable until it
    is retired (file names and status lines only; no contract is parsed)."""
    folder = config.root / config.catalog_dir / "contracts"
    older: dict[tuple[str, int], list[int]] = {}
    out: set[str] = set()
    for name, spec in sorted(config.datasets.items()):
        key = (spec.contract.name, major(spec.contract))
        if key not in older:
            found = []
            for path in folder.glob("*.yaml") if folder.is_dir() else ():
                m = file_major(path, spec.contract.name)
                if m is not None and m < key[1] and not _RETIRED.search(path.read_text()):
                    found.append(m)
            older[key] = sorted(set(found))
        out.update(f"{name}__v{m}" for m in older[key])
    return sorted(out)
