"""``lakepub shadow``: run a new contract version beside the current one on the same input, publish
neither, and compare what each would publish (seed 001 section VI, seed 002: "新旧逻辑对同一批数据
产出结果，按主键、分区和指标对账").

Invariant: a shadow run never touches the workspace's catalog or warehouse. Both definitions (the
dataset as published, under its current contract, and the same dataset under ``--contract NEW``)
are published by the real publisher, batch by batch, into two scratch workspaces (SQLite catalog
and warehouse in a temporary folder, removed afterwards), fed the same landing records: from
``--from`` (default: the beginning of the source) up to the position the dataset has published,
read once per contract (so the new contract's field rules, types and constraints apply to them).
Running the current definition again instead of reading the published table makes the two sides
see exactly the same input even with ``--from`` or after the janitor trimmed history; with the
default range it reproduces the published table (a test pins that).

The comparison joins the two outputs on the row key of the projection (``Kind.row_key``: the
``group_by`` columns of an aggregate, the entity key of a current-state table; NULL keys match
NULL) and classifies every key as only-old, only-new, changed (any shared column differs) or
unchanged. For numeric columns it records the relative difference ``|new - old| / max(|old|,
|new|)`` (0 when both are 0). ``shadow.diff.csv`` holds one row per key that is not unchanged,
sorted by partition and key; ``shadow.summary.json`` the counts, per-partition counts, the
largest relative difference per column, the columns only one side publishes (a removed field
is reported, not judged here: ``contract check`` judges structure), the contracts' sha256, the input range, the thresholds
and their verdict, and the diff's sha256 (``lakepub contract export --artifact`` lists it).

The gate: the NEW contract's ``shadow.thresholds`` (``max_relative_diff``, ``max_changed``,
``max_only_old``, ``max_only_new``, ``max_changed_fraction``); a threshold not given is 0, so a
contract without thresholds passes only when both versions publish the same rows (seed 002:
an unexplained difference is not waved through). Above a threshold the command exits 3
(``ShadowGateFailed``) after writing both files. Cost: two full projections of the input range
plus one DuckDB join; on this machine ~2x a ``lakepub run`` of the same records.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from lakepub import positions
from lakepub.errors import BlockedError, ConfigError, LakepubError

THRESHOLDS = ("max_relative_diff", "max_changed", "max_only_old", "max_only_new", "max_changed_fraction")
DIFF_FILE, SUMMARY_FILE = "shadow.diff.csv", "shadow.summary.json"


class ShadowGateFailed(BlockedError):
    """The new contract's output differs from the current one's beyond its shadow thresholds (exit 3);
    ``result`` is the comparison (its files are written)."""

    def __init__(self, result: "ShadowResult", message: str):
        super().__init__(message)
        self.result = result


class ShadowRunFailed(LakepubError):
    """One side of the shadow run refused the input; carries that refusal's exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class ShadowResult:
    dataset: str
    old: str  # schema refs
    new: str
    source: str
    start: dict[str, int]
    end: dict[str, int]
    events: int
    row_key: list[str]
    rows_old: int = 0
    rows_new: int = 0
    only_old: int = 0
    only_new: int = 0
    changed: int = 0
    unchanged: int = 0
    columns_only_old: list[str] = field(default_factory=list)
    columns_only_new: list[str] = field(default_factory=list)
    max_relative_diff: dict[str, float] = field(default_factory=dict)
    partitions: dict[str, dict[str, int]] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)
    contracts_sha256: dict[str, str] = field(default_factory=dict)
    content_sha256: str = ""  # the new contract's, status aside (``contract promote`` checks it)
    diff_path: str = ""
    summary_path: str = ""
    diff_sha256: str = ""

    @property
    def ok(self) -> bool:
        return not self.breaches

    @property
    def differing(self) -> int:
        return self.only_old + self.only_new + self.changed

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["ok"] = self.ok
        return out


def default_out(root: Path, dataset: str, contract: Any) -> Path:
    """Where ``lakepub shadow`` writes by default (and ``contract promote`` looks):
    ``<workspace>/.lakepub/shadow/<dataset>/<name>@v<version>``."""
    return Path(root) / ".lakepub" / "shadow" / dataset / f"{contract.name}@v{contract.version}"


def run_shadow(ws: Any, dataset: str, new_contract: Any, *, start: dict[str, int] | None = None,
               out_dir: Path | None = None, max_batch: int = 100_000,
               on_batch: Callable[[str, int], None] | None = None) -> ShadowResult:
    """Shadow-run ``dataset`` of workspace ``ws`` under ``new_contract`` (a loaded Contract)."""
    from lakepub.contract.lifecycle import content_sha256
    from lakepub.landing import LandingSource

    spec = ws.dataset(dataset)
    old = spec.contract
    if new_contract.name != old.name:
        raise ConfigError(f"--contract: {new_contract.path}: contract '{new_contract.name}' is not a version of "
                          f"'{old.name}', the contract of dataset '{dataset}'")
    thresholds = _thresholds(new_contract)
    end = ws.committed_positions(dataset).get(spec.source)
    if not end:
        raise ConfigError(f"dataset '{dataset}' has no published snapshot yet: a shadow run compares on the input "
                          f"it published; run 'lakepub run {dataset}' first")
    begin = positions.normalize(start or {})
    for part, offset in begin.items():
        if offset > end.get(part, 0):
            raise ConfigError(f"--from: {part}={offset} is past the published position {part}={end.get(part, 0)}")
    folder = ws.config.landing_dir(spec.source)
    if not LandingSource(folder, old).exists():
        raise ConfigError(f"landing folder {folder} does not exist: a shadow run re-reads the published input there")
    out = Path(out_dir) if out_dir is not None else default_out(ws.config.root, dataset, new_contract)
    scratch = Path(tempfile.mkdtemp(prefix="lakepub-shadow-"))
    try:
        sides = {}
        for side, contract in (("old", old), ("new", new_contract)):
            sides[side] = _publish_side(ws, spec, contract, scratch / side, folder, begin, end, max_batch,
                                        lambda n, s=side: on_batch(s, n) if on_batch else None)
        result = ShadowResult(dataset, old.schema_ref, new_contract.schema_ref, spec.source, begin,
                              positions.normalize(end), sides["old"][2], [],
                              thresholds=thresholds,
                              contracts_sha256={old.schema_ref: old.sha256, new_contract.schema_ref: new_contract.sha256},
                              content_sha256=content_sha256(new_contract))
        _compare(result, sides["old"], sides["new"], out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _judge(result)
    (out / SUMMARY_FILE).write_text(json.dumps(result.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
    if not result.ok:
        raise ShadowGateFailed(result, f"shadow {dataset}: {new_contract.schema_ref} differs from {old.schema_ref} beyond its "
                               f"thresholds ({'; '.join(result.breaches)}); nothing was published; see {result.diff_path}")
    return result


def _thresholds(contract: Any) -> dict[str, float]:
    given = dict(contract.terms.shadow.thresholds)
    for key, value in given.items():
        if key not in THRESHOLDS:
            raise ConfigError(f"{contract.path}: shadow.thresholds.{key}: unknown threshold "
                              f"(accepted: {', '.join(THRESHOLDS)})")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{contract.path}: shadow.thresholds.{key}: expected a number >= 0, got {value!r}")
    return {key: float(given.get(key, 0.0)) for key in THRESHOLDS}


def _publish_side(ws: Any, spec: Any, contract: Any, root: Path, folder: Path, begin: dict[str, int],
                  end: dict[str, int], max_batch: int, on_batch: Callable[[int], None]) -> tuple:
    """Publish the landing records [begin, end) under ``contract`` into a scratch workspace;
    returns (its Workspace, the dataset's kind, events read)."""
    from lakepub.config import WorkspaceConfig, entity_of, local_location
    from lakepub.landing import LandingSource
    from lakepub.projection.base import kind_of
    from lakepub.publish.publisher import prepare
    from lakepub.workspace import Workspace
    from lakepub.yamlfile import read_yaml

    raw = read_yaml(spec.path) if spec.path is not None else {}
    definition = {k: raw[k] for k in ("projection", "partition") if k in raw}
    where = f"{spec.path} (under {contract.schema_ref})"
    kind = kind_of(definition, entity_of(contract), where=where, dataset=spec.name)
    (root / "warehouse").mkdir(parents=True)
    config = WorkspaceConfig(
        root=root, catalog={"name": "shadow", "type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}",
                            "warehouse": local_location(root / "warehouse")},
        namespace=ws.config.namespace, datasets={spec.name: replace(spec, contract=contract, kind=kind)})
    scratch = Workspace(config)
    publisher = scratch.publisher(spec.name)
    events = 0
    for batch, start, stop in LandingSource(folder, contract).batches(begin, max_batch, until=end):
        shift = {p: n - begin.get(p, 0) for p, n in start.items()}, {p: n - begin.get(p, 0) for p, n in stop.items()}
        try:
            publisher.publish(prepare(batch, contract), source=spec.source, start=shift[0], end=shift[1],
                              dataset=spec.name)
        except LakepubError as exc:
            raise ShadowRunFailed(f"shadow run under {contract.schema_ref}: {exc.one_line()}", exc.exit_code) from None
        events += batch.num_rows
        on_batch(batch.num_rows)
    return scratch, kind, events


def _compare(result: ShadowResult, old_side: tuple, new_side: tuple, out: Path) -> None:
    import pyarrow.csv as pacsv

    from lakepub import duck

    old_ws, old_kind, _ = old_side
    new_ws, new_kind, _ = new_side
    key = list(new_kind.row_key)
    if list(old_kind.row_key) != key:
        raise ConfigError(f"the row key changes from {list(old_kind.row_key)} to {key} under {result.new}: "
                          "keys cannot be matched; a key change is a new major version built beside the old one")
    result.row_key = key
    old_t, new_t = _rows(old_ws, old_kind, result.dataset), _rows(new_ws, new_kind, result.dataset)
    result.rows_old, result.rows_new = old_t.num_rows, new_t.num_rows
    old_cols = [c for c in old_t.column_names if c not in key]
    new_cols = [c for c in new_t.column_names if c not in key]
    shared = [c for c in new_cols if c in old_cols]
    result.columns_only_old = [c for c in old_cols if c not in new_cols]
    result.columns_only_new = [c for c in new_cols if c not in old_cols]
    numeric = [c for c in shared if _numeric(new_t.schema.field(c).type) and _numeric(old_t.schema.field(c).type)]
    con = duck.connect()
    con.register("o", _labelled(old_t, old_kind))
    con.register("n", _labelled(new_t, new_kind))
    q = lambda c: '"' + c.replace('"', '""') + '"'  # noqa: E731
    on = " AND ".join(f"o.{q(k)} IS NOT DISTINCT FROM n.{q(k)}" for k in key) or "TRUE"
    differs = " OR ".join(f"o.{q(c)} IS DISTINCT FROM n.{q(c)}" for c in shared) or "FALSE"
    rel = [f"CASE WHEN o.{q(c)} IS NULL OR n.{q(c)} IS NULL THEN NULL "
           f"WHEN greatest(abs(o.{q(c)}::DOUBLE), abs(n.{q(c)}::DOUBLE)) = 0 THEN 0.0 "
           f"ELSE abs(n.{q(c)}::DOUBLE - o.{q(c)}::DOUBLE) / greatest(abs(o.{q(c)}::DOUBLE), abs(n.{q(c)}::DOUBLE)) "
           f"END AS {q('rel_diff_' + c)}" for c in numeric]
    keys_sql = [f"coalesce(n.{q(k)}, o.{q(k)}) AS {q(k)}" for k in key]
    status = ("CASE WHEN n.__present IS NULL THEN 'only_old' WHEN o.__present IS NULL THEN 'only_new' "
              f"WHEN {differs} THEN 'changed' ELSE 'unchanged' END")
    cols = [f"o.{q(c)} AS {q('old_' + c)}" for c in old_cols] + [f"n.{q(c)} AS {q('new_' + c)}" for c in new_cols]
    con.execute(
        f"CREATE TEMP TABLE joined AS SELECT {', '.join(keys_sql + ['coalesce(n.__partition, o.__partition) AS partition', status + ' AS status'] + cols + rel)} "
        f"FROM (SELECT *, TRUE AS __present FROM o) o FULL OUTER JOIN (SELECT *, TRUE AS __present FROM n) n ON {on}"
    )
    counts = con.execute("SELECT status, count(*) FROM joined GROUP BY status").fetchall()
    for status_name, n in counts:
        setattr(result, status_name, n)
    for c in numeric:
        (worst,) = con.execute(f"SELECT coalesce(max({q('rel_diff_' + c)}), 0) FROM joined "
                               "WHERE status = 'changed'").fetchone()
        result.max_relative_diff[c] = float(worst)
    for part, status_name, n in con.execute(
            "SELECT partition, status, count(*) FROM joined WHERE status <> 'unchanged' GROUP BY ALL ORDER BY ALL").fetchall():
        result.partitions.setdefault(str(part), {})[status_name] = n
    order = ", ".join(["partition"] + [q(k) for k in key])
    diff = con.execute(f"SELECT * FROM joined WHERE status <> 'unchanged' ORDER BY {order} NULLS FIRST").to_arrow_table()
    con.close()
    out.mkdir(parents=True, exist_ok=True)
    path = out / DIFF_FILE
    pacsv.write_csv(diff, path)
    result.diff_path, result.summary_path = str(path), str(out / SUMMARY_FILE)
    result.diff_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(ws: Any, kind: Any, dataset: str) -> pa.Table:
    """The scratch dataset's published rows (empty when the input changed nothing)."""
    from lakepub import duck

    location = ws.published_tables().get(dataset)
    if location is None:
        return kind.empty()
    con = duck.connect(ws.config.catalog)
    try:
        return con.execute(f"SELECT * FROM {duck.scan_sql(location)}").to_arrow_table()
    finally:
        con.close()


def _labelled(table: pa.Table, kind: Any) -> pa.Table:
    """``table`` with a ``__partition`` column: the label of each row's partition."""
    if not kind.partition_columns or table.num_rows == 0:
        labels = ["(unpartitioned)" if not kind.partition_columns else ""] * table.num_rows
    else:
        values = kind.partition.values(table)
        cache: dict[Any, str] = {}
        labels = [cache.setdefault(v, kind.partition.label(v)) if _hashable(v) else kind.partition.label(v)
                  for v in values]
    return table.append_column("__partition", pa.array(labels, pa.string()))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _judge(result: ShadowResult) -> None:
    t = result.thresholds
    worst = max(result.max_relative_diff.values(), default=0.0)
    checks = [
        ("max_relative_diff", worst, f"largest relative difference {worst:.6g}"),
        ("max_changed", result.changed, f"{result.changed} changed row(s)"),
        ("max_only_old", result.only_old, f"{result.only_old} row(s) only in {result.old}"),
        ("max_only_new", result.only_new, f"{result.only_new} row(s) only in {result.new}"),
        ("max_changed_fraction", result.differing / max(result.rows_old, 1),
         f"{result.differing} of {result.rows_old} row(s) differ"),
    ]
    result.breaches = [f"{text} > {name} {t[name]:g}" for name, value, text in checks if value > t[name]]
