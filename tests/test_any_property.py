"""Property test of the generic path (issue 11): any contract, any dataset, any stream.

Per example, hypothesis generates:

* a contract: a key of 1-2 fields (string/long/int/date), an int or long version, 2-5 other
  fields (string/long/int/date/boolean/decimal(10,2), some ``nullable: true``) and a deleted
  flag, in a random declared order, written as YAML with ``entity:``;
* 1-3 datasets of that entity: aggregates (group_by 1-2 fields, sums over the integer and
  decimal fields, a count()) and current-state tables (a column subset, or the default; written
  copy-on-write or merge-on-read, the latter also read back by pyiceberg and DataFusion), each
  with a random partition valid for its kind: none | identity(col) | day/month/year(col) of a
  date column | bucket(N, col);
* a stream over a few entities with tiny value domains (so entities move between groups and
  partitions all the time): creates, updates, deletes, re-creates at a higher version, exact
  duplicates and late older versions (both replays and never-seen versions filling a gap), split
  in random batches, published through ``Workspace.publish`` or landed as JSONL segments in one
  or two source partitions and published with ``Workspace.run``;
* sometimes a conflicting event (an accepted key and version with another payload) in a batch:
  the publish must raise ``PayloadConflict`` (exit 3) and move nothing, then the batch goes
  through without it;
* sometimes the last dataset is added to the entity only after some batches (its YAML written,
  the workspace opened again): it is built from the ledger and must agree with the others.

After every batch, every published table read back through DuckDB (``Workspace.query``) must
equal a brute-force oracle over all accepted events (the latest version of each key, live if not
deleted), the committed position must be the stream's, and ``verify --deep`` must pass.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lakepub.errors import ConfigError, PayloadConflict
from lakepub.init import init_workspace
from lakepub.store.layout import ledger_id
from lakepub.workspace import Workspace

ENTITY = "ent"
SOURCE = "ent_src"
CONTRACT_REF = f"contracts/{ENTITY}@v1.0"
DECIMAL = "decimal(10,2)"
# identity(col) of a date column cannot be published yet (the partition value reaches pyiceberg's
# manifest writer as a datetime.date, not as days: TypeError), see
# test_identity_partition_of_a_date below; set True once that test passes.
IDENTITY_OF_DATES = False  # refused: identity(day) of a date is day(day) (see the last test)
KEY_TYPES = ["string", "long", "int", "date"]
FIELD_TYPES = ["string", "long", "int", "date", "boolean", DECIMAL]
SUMMABLE = ("long", "int", DECIMAL)
# Tiny domains: few entities, few groups, dates across day/month/year boundaries.
DOMAIN: dict[str, list[Any]] = {
    "string": ["a", "b", "é"],
    "long": [-7, 0, 3, 2**40],
    "int": [-1, 0, 5],
    "date": ["2024-12-31", "2025-01-01", "2025-01-31", "2025-02-01"],
    "boolean": [True, False],
    DECIMAL: ["1.50", "-2.25", "0.00", "12345678.99"],
}
KEY_DOMAIN: dict[str, list[Any]] = {
    "string": ["k", "kk", "Ω"],
    "long": [1, -2, 2**33],
    "int": [0, 7],
    "date": ["2025-03-01", "1999-12-31"],
}


# --- the scenario -------------------------------------------------------------------------------


@dataclass
class Scenario:
    contract: dict  # the contract YAML
    types: dict[str, str]  # field -> type
    key: list[str]
    vname: str  # the version field
    dname: str  # the deleted flag
    others: list[str]  # the non-role fields
    datasets: list[dict]  # dataset YAMLs, in creation order
    late: int | None  # index of a dataset added after ``late_after`` batches (None: all from the start)
    late_after: int
    late_now: bool  # built at once by ``run`` (else by the next batch's publish)
    events: list[dict]
    bounds: list[int]  # batch boundaries in ``events``
    conflicts: dict[int, tuple[int, dict]]  # batch -> (insert position in the batch, conflicting event)
    use_run: bool  # land JSONL segments and ``run`` (else ``publish``)
    partitions: list[str]  # with use_run: the source partition of each batch's segment
    max_batch: int
    key_index: bool

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: enough to reproduce it
        return "\n".join([
            "Scenario(", f"contract={self.contract!r},", f"datasets={self.datasets!r},",
            f"late={self.late!r}, late_after={self.late_after!r}, late_now={self.late_now!r},", f"events={self.events!r},",
            f"bounds={self.bounds!r},", f"conflicts={self.conflicts!r},",
            f"use_run={self.use_run!r}, partitions={self.partitions!r}, max_batch={self.max_batch!r}, "
            f"key_index={self.key_index!r})",
        ])


def _partitions_for(columns: list[str], types: dict[str, str], draw) -> str:
    choices = ["none"]
    for c in columns:
        t = types[c]
        if t != "date" or IDENTITY_OF_DATES:
            choices.append(f"identity({c})")
        if t == "date":
            choices += [f"day({c})", f"month({c})", f"year({c})"]
        if t != "boolean":  # Iceberg has no bucket transform of booleans
            choices.append(f"bucket({draw(st.integers(1, 4))}, {c})")
    return draw(st.sampled_from(choices))


def _payload(draw, scenario_types: dict[str, str], nullable: dict[str, bool], others: list[str],
             deleted: bool, dname: str) -> dict:
    out: dict[str, Any] = {}
    for f in others:
        domain = DOMAIN[scenario_types[f]]
        if deleted:  # any non-key field may be null on a delete
            out[f] = draw(st.sampled_from([None, *domain]))
        elif nullable[f]:
            out[f] = draw(st.sampled_from([*domain, None]))
        else:
            out[f] = draw(st.sampled_from(domain))
    out[dname] = deleted
    return out


@st.composite
def scenarios(draw) -> Scenario:
    # The contract.
    key = [f"id{i}" for i in range(draw(st.integers(1, 2)))]
    others = [f"f{i}" for i in range(draw(st.integers(2, 5)))]
    types = {k: draw(st.sampled_from(KEY_TYPES)) for k in key}
    types |= {f: draw(st.sampled_from(FIELD_TYPES)) for f in others}
    vname, dname = draw(st.sampled_from(["version", "rev"])), draw(st.sampled_from(["deleted", "gone"]))
    types[vname] = draw(st.sampled_from(["long", "int"]))
    types[dname] = "boolean"
    nullable = {f: draw(st.booleans()) for f in others}
    order = draw(st.permutations([*key, vname, *others, dname]))
    fields = {n: ({"type": types[n], "nullable": True} if nullable.get(n) else types[n]) for n in order}
    contract = {"name": ENTITY, "version": "1.0",
                "entity": {"key": list(key), "version": vname, "deleted": dname}, "fields": fields}

    # The datasets.
    datasets = []
    for i in range(draw(st.sampled_from([2, 1, 3]))):
        base = {"name": f"d{i}", "source": SOURCE, "contract": CONTRACT_REF, "entity": ENTITY}
        if draw(st.booleans()):
            group_by = draw(st.lists(st.sampled_from([*key, *others]), min_size=1, max_size=2, unique=True))
            summable = [f for f in [*key, *others] if types[f] in SUMMABLE]
            summed = draw(st.lists(st.sampled_from(summable), unique=True)) if summable else []
            measures = {f"s_{f}": f"sum({f})" for f in summed}
            measures = dict(draw(st.permutations([*measures.items(), ("n", "count()")])))
            projection = {"kind": "aggregate", "group_by": group_by, "measures": measures}
            partition = _partitions_for(group_by, types, draw)
        else:
            projection = {"kind": "current"}
            if draw(st.booleans()):
                projection["columns"] = draw(st.lists(st.sampled_from([*others, vname, dname, *key]),
                                                      unique=True))
                published = [*key, *[c for c in projection["columns"] if c not in key]]
            else:
                published = [*key, *others]
            partition = _partitions_for(published, types, draw)
            mode = draw(st.sampled_from([None, "copy-on-write", "merge-on-read"]))  # issue 12: both write modes
            if mode is not None:
                base["write_mode"] = mode
        datasets.append({**base, "projection": projection, "partition": partition})

    # The stream: a deterministic payload per (key, version), so only injected conflicts conflict.
    keys = draw(st.lists(st.tuples(*[st.sampled_from(KEY_DOMAIN[types[k]]) for k in key]),
                         min_size=1, max_size=4, unique=True))
    payloads: dict[tuple, dict] = {}
    top: dict[tuple, int] = {}
    events: list[dict] = []

    def event(k: tuple, v: int) -> dict:
        if (k, v) not in payloads:
            payloads[(k, v)] = _payload(draw, types, nullable, others, draw(st.integers(0, 3)) == 3, dname)
        return {**dict(zip(key, k)), vname: v, **payloads[(k, v)]}

    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["next", "next", "next", "dup", "late"]))
        k = draw(st.sampled_from(keys))
        if op == "next" or k not in top:
            v = top.get(k, 0) + draw(st.integers(1, 3))  # gaps, for late versions never seen
        elif op == "dup":
            v = draw(st.sampled_from(sorted(v for (kk, v) in payloads if kk == k)))
        else:
            v = draw(st.integers(1, max(1, top[k] - 1)))
        top[k] = max(top.get(k, 0), v)
        events.append(event(k, v))

    n_batches = draw(st.integers(1, min(5, len(events))))
    cuts = draw(st.lists(st.integers(1, len(events) - 1), min_size=n_batches - 1, max_size=n_batches - 1,
                         unique=True)) if n_batches > 1 else []
    bounds = sorted({0, len(events), *cuts})
    conflicts: dict[int, tuple[int, dict]] = {}
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if draw(st.integers(0, 3)) == 3:
            original = draw(st.sampled_from(events[:hi]))
            if original[dname]:  # revived at the same version
                other = _payload(draw, types, nullable, others, False, dname)
            else:  # deleted at the same version, maybe with another value too
                other = {**{f: original[f] for f in others}, dname: True}
                if draw(st.booleans()):
                    f = draw(st.sampled_from(others))
                    other[f] = draw(st.sampled_from([None, *DOMAIN[types[f]]]))
            bad = {**{c: original[c] for c in key}, vname: original[vname], **other}
            conflicts[b] = (draw(st.integers(0, hi - lo)), bad)
    late = len(datasets) - 1 if len(datasets) > 1 and draw(st.booleans()) else None
    late_after = draw(st.integers(1, len(bounds) - 1)) if late is not None else 0
    late_now = draw(st.booleans())
    use_run = draw(st.booleans())
    partitions = [draw(st.sampled_from(["p0", "p1"])) for _ in bounds[1:]] if use_run else []
    return Scenario(contract, types, key, vname, dname, others, datasets, late, late_after, late_now, events, bounds, conflicts, use_run,
                    partitions, draw(st.sampled_from([2, 5, 100_000])) if use_run else 100_000, draw(st.booleans()))


# --- the oracle ---------------------------------------------------------------------------------


def _value(t: str, v: Any) -> Any:
    if v is None:
        return None
    if t == "date":
        return date.fromisoformat(v)
    if t == DECIMAL:
        return Decimal(v)
    return v


def _live(s: Scenario, accepted: list[dict]) -> dict[tuple, dict]:
    latest: dict[tuple, dict] = {}
    for e in accepted:
        k = tuple(e[c] for c in s.key)
        if k not in latest or e[s.vname] > latest[k][s.vname]:
            latest[k] = e
    return {k: e for k, e in latest.items() if not e[s.dname]}


def _expected(s: Scenario, d: dict, accepted: list[dict]) -> tuple[list[str], list[tuple]]:
    """The published columns and rows (sorted) of dataset ``d`` after ``accepted``."""
    live = _live(s, accepted).values()
    p = d["projection"]
    if p["kind"] == "aggregate":
        measures = p["measures"]
        columns = [*p["group_by"], *measures]
        groups: dict[tuple, dict[str, Any]] = defaultdict(lambda: {m: 0 for m in measures})
        for e in live:
            g = groups[tuple(_value(s.types[c], e[c]) for c in p["group_by"])]
            for m, text in measures.items():
                if text == "count()":
                    g[m] += 1
                else:
                    f = text[4:-1]
                    g[m] += _value(s.types[f], e[f]) or 0
        rows = [(*g, *vals.values()) for g, vals in groups.items()]
    else:
        default = [c for c in s.contract["fields"] if c not in (s.vname, s.dname)]  # in declared order
        listed = p.get("columns", default)
        columns = [*s.key, *[c for c in listed if c not in s.key]]
        rows = [tuple(_value(s.types[c], e[c]) for c in columns) for e in live]
    return columns, sorted(rows, key=repr)


def _published(ws: Workspace, name: str) -> tuple[list[str], list[tuple]]:
    table = ws.query(f'SELECT * FROM "{name}"')
    return table.column_names, sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _read_elsewhere(ws: Workspace, name: str, columns: list[str]) -> tuple[list[str], list[tuple]]:
    """The table read by pyiceberg and by iceberg-rust through DataFusion (must agree)."""
    from datafusion import SessionContext

    table = ws.catalog.load_table((ws.config.namespace, name))
    ctx = SessionContext()
    ctx.register_table("t", table)
    out = []
    for arrow in (table.scan().to_arrow(), ctx.sql("SELECT * FROM t").to_arrow_table()):
        out.append(sorted((tuple(r[c] for c in columns) for r in arrow.to_pylist()), key=repr))
    assert out[0] == out[1], ("pyiceberg and DataFusion disagree", out)
    return columns, out[0]


def _pointers(ws: Workspace, names: list[str]) -> dict[str, str | None]:
    out = {"ledger": ws.catalog.load_table(ledger_id(ws.config.namespace, ENTITY)).metadata_location}
    for name in names:
        out[name] = ws.catalog.load_table((ws.config.namespace, name)).metadata_location
    return out


# --- the test -----------------------------------------------------------------------------------


def _write_dataset(root: Path, d: dict) -> None:
    (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))


@dataclass
class _Landing:
    root: Path  # landing/<source>: one folder per source partition, JSONL segments in name order

    def write(self, partition: str, segment: int, events: list[dict]) -> None:
        folder = self.root / partition
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{segment:05d}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(s=scenarios())
def test_any_dataset_equals_oracle(s: Scenario):
    _run(s)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(s=scenarios())
def test_any_dataset_equals_oracle_with_every_current_dataset_merge_on_read(s: Scenario):
    """The same property with every ``current`` dataset written merge-on-read (issue 12); a
    partition holding a delete file is rewritten whole by the next publish changing it, so both
    paths of a merge-on-read publish (``merge_on_read.bounded``) are exercised."""
    from lakepub.publish import merge_on_read

    for i, d in enumerate(s.datasets):
        if d["projection"]["kind"] == "current":
            d["write_mode"] = "merge-on-read"
            d["fold_threshold"] = (1.0, 0.5)[i % 2]  # the deleted-fraction rule off, and at a half
    limit, merge_on_read.MAX_DELETE_FILES = merge_on_read.MAX_DELETE_FILES, 1
    try:
        _run(s)
    finally:
        merge_on_read.MAX_DELETE_FILES = limit


def _run(s: Scenario) -> None:
    for d in s.datasets:  # shown by --hypothesis-show-statistics
        event(f"{d['projection']['kind']} {d['partition'].split('(')[0]}")
        if d["projection"]["kind"] == "current":
            event(f"current {d.get('write_mode', 'default mode')}")
    event(f"key arity {len(s.key)}; {len(s.bounds) - 1} batch(es); {'run' if s.use_run else 'publish'}")
    event(f"conflict: {bool(s.conflicts)}; dataset added later: {s.late is not None}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root)
        config = yaml.safe_load((root / "lakepub.yaml").read_text())
        config["key_index"] = s.key_index
        (root / "lakepub.yaml").write_text(yaml.safe_dump(config))
        (root / "catalog" / "contracts" / f"{ENTITY}@v1.0.yaml").write_text(yaml.safe_dump(s.contract, sort_keys=False))
        active = [d for i, d in enumerate(s.datasets) if i != s.late]
        for d in active:
            _write_dataset(root, d)
        landing = _Landing(root / "landing" / SOURCE)
        landing.root.mkdir(parents=True)
        ws = Workspace.open(root)
        accepted: list[dict] = []
        position: dict[str, int] = {}

        def publish(batch: list[dict], b: int) -> None:
            if s.use_run:
                landing.write(s.partitions[b], b, batch)
                ws.run(active[0]["name"], max_batch=s.max_batch)
            else:
                lo = position.get("p0", 0)
                ws.publish(active[-1]["name"], batch, start={"p0": lo}, end={"p0": lo + len(batch)})

        def check() -> None:
            published = ws.published_tables()
            assert set(built) <= set(published), (built, published)
            for d in active:
                if d["name"] not in published:  # before the first publish, or added and not built yet
                    assert d["name"] not in built
                    continue
                expected = _expected(s, d, accepted)
                assert _published(ws, d["name"]) == expected, d
                if d.get("write_mode") == "merge-on-read":  # deletes applied alike by every reader
                    assert _read_elsewhere(ws, d["name"], expected[0]) == expected, d
                report = ws.verify(d["name"], deep=True)
                assert report.ok, (d["name"], report.mismatches)
                assert ws.committed_positions(d["name"]) == ({SOURCE: position} if position else {})

        built: list[str] = []  # the datasets that have a publish (their pointers must not move on a conflict)
        for b, (lo, hi) in enumerate(zip(s.bounds, s.bounds[1:])):
            batch = s.events[lo:hi]
            if b in s.conflicts:
                at, bad = s.conflicts[b]
                before = _pointers(ws, built) if built else None
                with pytest.raises(PayloadConflict) as raised:
                    if s.use_run:  # the whole segment in one batch, so that nothing moves
                        landing.write(s.partitions[b], b, [*batch[:at], bad, *batch[at:]])
                        ws.run(active[0]["name"], max_batch=100_000)
                    else:
                        lo_ = position.get("p0", 0)
                        ws.publish(active[0]["name"], [*batch[:at], bad, *batch[at:]],
                                   start={"p0": lo_}, end={"p0": lo_ + len(batch) + 1})
                assert raised.value.exit_code == 3
                if before is not None:
                    assert _pointers(ws, built) == before
                check()  # nothing changed
            publish(batch, b)
            accepted.extend(batch)
            part = s.partitions[b] if s.use_run else "p0"
            position[part] = position.get(part, 0) + len(batch)
            built = [d["name"] for d in active]
            check()
            if s.late is not None and b + 1 == s.late_after:
                # A dataset added to the entity once it has history: built from the ledger.
                _write_dataset(root, s.datasets[s.late])
                ws = Workspace.open(root)
                active.append(s.datasets[s.late])
                if b + 1 == len(s.bounds) - 1 or s.late_now:
                    ws.run(s.datasets[s.late]["name"], max_batch=s.max_batch)  # nothing pending: builds it
                    built.append(s.datasets[s.late]["name"])
                    check()



def test_identity_partition_of_a_date_is_refused_with_the_equivalent(tmp_path: Path):
    """identity(day) of a date is day(day): refused at definition time, naming it (the partition
    value of a date identity would need pyiceberg's internal form through lakepub's state)."""
    init_workspace(tmp_path)
    (tmp_path / "catalog" / "contracts" / "c@v1.0.yaml").write_text(yaml.safe_dump({
        "name": "c", "version": "1.0", "entity": {"key": ["id"], "version": "version", "deleted": "deleted"},
        "fields": {"id": "string", "version": "long", "day": "date", "deleted": "boolean"}}))
    _write_dataset(tmp_path, {"name": "cur", "source": "c", "contract": "contracts/c@v1.0",
                              "projection": {"kind": "current"}, "partition": "identity(day)"})
    with pytest.raises(ConfigError, match=r"partition: identity\(day\).*day\(day\)"):
        Workspace.open(tmp_path)
