"""The ``lakepub`` command line: thin click commands over ``lakepub.workspace.Workspace``.

Only click and lakepub's light modules (errors, output, cli_support) are imported here: each
command imports what it runs with (the workspace pulls in pyiceberg, SQLAlchemy, pyarrow and
DuckDB, ~0.6 s of imports), so ``lakepub --help`` pays for none of it
(``scripts/bench/startup.py`` measures it, ``tests/test_startup.py`` pins it). ``status``, ``log``
and ``query`` first ask the quick read path (``lakepub.quick``: sqlite3 + json, no pyiceberg), which
prints exactly what the full path would or declines; the full path then remembers the workspace
for it (``quick.remember``).

Exit codes: 0 ok (including "already published"), 1 verify mismatch or internal error,
2 invalid input or configuration, 3 refused by the protocol (payload conflict, stale start),
4 failed and safe to retry (commit contention), 5 outcome unknown (check ``lakepub log``),
6 ``lakepub wait`` timed out.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lakepub import output
from lakepub.cli_support import OneLineUsage, format_option, handle_errors
from lakepub.errors import UserError

if TYPE_CHECKING:
    from lakepub.workspace import Workspace

EXIT_CODES_HELP = (
    "Exit codes: 0 ok (also: batch already published), 1 verify mismatch or internal error, "
    "2 invalid input or config, 3 refused (payload conflict, stale start), 4 failed and safe to retry, "
    "5 outcome unknown, 6 wait timed out."
)


def _ws(ctx: click.Context, run: tuple[str, Path | None] | None = None) -> Workspace:
    """The workspace of ``-w``; ``run`` = (dataset, --landing) for ``lakepub run``, whose landing
    source starts reading on a thread as soon as the configuration is loaded (``_prefetching``)."""
    import gc

    # The workspace's imports (pyiceberg's pydantic models, SQLAlchemy, pyarrow) only build objects
    # that live as long as the process: the cyclic GC's passes over them were ~0.1 s of CPU (15% of
    # the imports, scripts/bench/throughput.py); frozen, later collections skip them too. Only on
    # the first import: a process that already holds other objects (tests) keeps collecting them.
    # Then the youngest generation is collected every 20,000 allocations instead of 700: a publish
    # of 1M events made ~30 young collections for ~0.1-0.2 s of CPU, and now makes one or two.
    enabled = gc.isenabled() and "lakepub.workspace" not in sys.modules
    if enabled:
        gc.disable()
    try:
        config, prefetched = _prefetching(ctx.obj["workspace"], *run) if run is not None else (None, None)
        from lakepub.workspace import Workspace
    finally:
        if enabled:
            gc.freeze()
            gc.set_threshold(20_000, 10, 10)
            gc.enable()
    return Workspace(config, prefetched=prefetched) if config is not None else Workspace.open(ctx.obj["workspace"])


def _prefetching(path: Path, dataset: str, landing: Path | None) -> tuple[Any, Any]:
    """``lakepub run``: load the configuration (~0.35 s of imports: pydantic, pyarrow, SQLAlchemy's
    URL parser), then start the landing source counting its segments and parsing the pending ones
    on a thread (``LandingSource.prefetch``, up to 64 MB of JSON; the position guessed by reading
    the SQLite catalog's row with ``sqlite3``, ``quick.catalog.committed_guess``) *before* importing pyiceberg and the publisher (~0.3 s more): the
    first batch's read (~0.25 s of CPU, GIL released) no longer waits for the imports and the
    catalog, and the second core, idle during the imports, parses ahead. Nothing is prefetched
    for a dataset the configuration does not know (the workspace then reports it), nor with
    ``LAKEPUB_PREFETCH=0`` (to compare, ``scripts/bench/run_process_ab.py``)."""
    from lakepub.config import open_config

    config = open_config(path)
    try:
        spec = config.dataset(dataset)
    except Exception:  # noqa: BLE001 - reported by Workspace.run
        return config, None
    from lakepub.landing import LandingSource
    from lakepub.quick.catalog import committed_guess

    source = LandingSource(config.landing_dir(spec.source, landing), spec.contract)
    if not source.exists() or os.environ.get("LAKEPUB_PREFETCH", "1").strip().lower() in ("0", "false", "no", "off"):
        return config, None
    return config, source.prefetch(lambda: committed_guess(config, dataset, spec.source))




@click.group(cls=OneLineUsage, epilog=EXIT_CODES_HELP)
@click.option("-w", "--workspace", type=click.Path(file_okay=False, path_type=Path), default=".",
              envvar="LAKEPUB_WORKSPACE", show_default=True,
              help="Workspace folder (holding lakepub.yaml, or below it). Env: LAKEPUB_WORKSPACE.")
@click.option("--log-format", type=click.Choice(("text", "json")), default="text", envvar="LAKEPUB_LOG_FORMAT",
              show_default=True, help="Logs on stderr: text for people, json for schedulers (one object per line: "
              "ts, level, logger, message, dataset, batch_id, snapshot_id, ...). Env: LAKEPUB_LOG_FORMAT.")
@click.option("-v", "--verbose", count=True,
              help="More logs: text shows info with -v, debug with -vv; json adds debug. "
                   "Env: LAKEPUB_LOG_LEVEL=debug|info|warning|error sets the base level.")
@click.option("-q", "--quiet", count=True, help="Only errors on stderr (no warnings, info, progress bar).")
@click.version_option(package_name="lakepub")
@click.pass_context
def main(ctx: click.Context, workspace: Path, log_format: str, verbose: int, quiet: int) -> None:
    """Publish full-state entity events as atomic Iceberg snapshots; read them with DuckDB."""
    from lakepub import logs
    from lakepub.errors import LakepubError

    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["quiet"] = bool(quiet)
    try:
        logs.configure(log_format, verbose, quiet)
    except LakepubError as exc:  # LAKEPUB_LOG_LEVEL spelt wrong
        click.echo(f"error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)


@main.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--force", is_flag=True, help="Overwrite existing template files.")
@handle_errors
def init(folder: Path, force: bool) -> None:
    """Create a workspace in FOLDER: lakepub.yaml (SQLite catalog + local warehouse under .lakepub/),
    catalog/ with the orders_daily dataset and its contract, and landing/."""
    from lakepub.init import init_workspace

    for path in init_workspace(folder, force=force):
        click.echo(f"wrote {path}")
    click.echo(f"next: lakepub -w {folder} run orders_daily   (after putting events in landing/orders/<partition>/)")


@main.command()
@click.argument("dataset")
@click.option("--events", "events_path", required=True,
              type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="Events file: JSON Lines (.jsonl) or Parquet (.parquet); - reads standard input.")
@click.option("--source", default=None,
              help="Source name (default: the dataset's source); letters, digits, _ . -")
@click.option("--start", required=True, help='Start position vector, e.g. \'{"p0": 0}\'.')
@click.option("--end", required=True, help='End position vector, e.g. \'{"p0": 4}\'.')
@format_option
@click.pass_context
@handle_errors
def publish(ctx: click.Context, dataset: str, events_path: Path, source: str | None, start: str, end: str, fmt: str) -> None:
    """Publish one batch of events as a new snapshot of DATASET (and of every dataset of its entity).

    Events are validated against the dataset's contract. The start vector must equal the
    committed position of the source; a batch that is already published exits 0 and says so."""
    result = _ws(ctx).publish(dataset, events_path, source=source, start=start, end=end)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    if result.status == "already-published":
        click.echo(f"already published: batch {result.batch_id[:12]} is in snapshot {result.snapshot_id}; nothing to do")
        return
    c = result.counts
    click.echo(f"published {dataset} snapshot {result.snapshot_id} (batch {result.batch_id[:12]})")
    click.echo(f"  events {c.events}, new versions {c.new_versions}, duplicates {c.duplicates}, stale {c.stale}, "
               f"superseded {c.superseded}, "
               f"deletes {c.deletes}, entities changed {c.entities_changed}")
    if c.rejected:
        click.echo(f"  rejected {c.rejected} event(s) by the contract's publish gates (see: lakepub rejects {dataset})")
    click.echo(f"  partitions rewritten: {', '.join(result.partitions) or 'none'}")
    for other, partitions in sorted(result.datasets.items()):
        if other != dataset:  # the entity's other datasets moved in the same commit
            click.echo(f"  also {other}: {len(partitions)} partition(s) rewritten")
    click.echo(f"  position {result.source}: {output.vector(result.end)}")


@main.command()
@click.argument("dataset")
@click.option("--landing", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The source's landing folder (default: <workspace>/landing/<source>).")
@click.option("--max-batch", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Most records per published batch.")
@click.option("--follow", is_flag=True,
              help="Keep running (one warm process): publish whatever landed every --interval, until SIGTERM "
                   "or Ctrl-C, which stop between batches (never within a commit) with exit 0.")
@click.option("--interval", default=None, metavar="DURATION",
              help="With --follow: how often to look for new records (whole seconds or more: 1s, 10s, 5m; "
                   "default 10s).")
@format_option
@click.pass_context
@handle_errors
def run(ctx: click.Context, dataset: str, landing: Path | None, max_batch: int, follow: bool, interval: str | None,
        fmt: str) -> None:
    """Publish everything in the landing folder past the committed position, batch by batch, into
    DATASET and every dataset of its entity (a dataset added since is first built from history).

    On a terminal a progress bar shows on stderr; when stdout is not a terminal (a scheduler, a
    pipe) one line per published batch is printed as it commits: snapshot id, batch id prefix,
    events, entities changed, duplicates, end position and seconds. --format json prints one JSON
    document at the end (per-batch records: --log-format json on stderr).

    Safe to run again at any time: with nothing new it publishes nothing.

    With --follow it keeps publishing as the landing folder grows (a line per batch; --format json:
    a JSON object per cycle that published, and one when it stops)."""
    import time

    if interval is not None and not follow:
        raise UserError("--interval only applies with --follow (lakepub run DATASET --follow --interval 10s)")
    ws = _ws(ctx, (dataset, landing) if not follow else None)
    if follow:
        from lakepub.publish.follow_cli import run_follow

        run_follow(ws, dataset, landing=landing, max_batch=max_batch, interval=interval or "10s", fmt=fmt)
        return
    bar: Any = None
    lines = fmt != "json" and not sys.stdout.isatty()
    quiet = (ctx.obj or {}).get("quiet", False)
    last = time.perf_counter()

    def on_start(pending: int) -> None:
        nonlocal bar
        if pending and fmt != "json" and not lines and not quiet:
            bar = click.progressbar(length=pending, label=f"publishing {dataset}", file=sys.stderr,
                                    show_pos=True, item_show_func=lambda s: s)
            bar.__enter__()

    def on_batch(result: Any, pending: int) -> None:
        nonlocal last
        if bar is not None:
            bar.update(result.counts.events or 0, f"snapshot {result.snapshot_id}")
        if lines:
            now = time.perf_counter()
            c = result.counts
            click.echo(f"snapshot {result.snapshot_id} batch {result.batch_id[:12]}: {c.events} events, "
                       f"{c.entities_changed} entities changed, {c.duplicates} duplicates, "
                       f"end {output.vector(result.end)}, {now - last:.2f} s")
            last = now

    prefetched = ws._prefetched
    try:
        result = ws.run(dataset, landing=landing, max_batch=max_batch, on_start=on_start, on_batch=on_batch)
    finally:
        if prefetched is not None:  # a run that ended early (an error, a retired dataset) leaves
            prefetched.drop_prefetched(lambda _: False)  # no parse to wait for at exit
        if bar is not None:
            bar.__exit__(None, None, None)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    if result.skipped:
        click.echo(f"skipped: {result.skipped}")
        return
    if not result.batches:
        click.echo(f"nothing new in {result.landing}; {dataset} is at {output.vector(result.end)}")
        return
    changed = sum(b.counts.entities_changed for b in result.batches)
    dups = sum(b.counts.duplicates for b in result.batches)
    moved = sorted({name for b in result.batches for name in b.datasets} or {dataset})
    rejected = sum(b.counts.rejected for b in result.batches)
    gated = f", {rejected} rejected by the publish gates (lakepub rejects {dataset})" if rejected else ""
    click.echo(f"published {len(result.batches)} batch(es), {result.events} events ({changed} entities changed, "
               f"{dups} duplicates ignored{gated}) into {', '.join(moved)}; {result.source} now at "
               f"{output.vector(result.end)}")


@main.command()
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(output.QUERY_FORMATS), default="table", show_default=True)
@click.pass_context
@handle_errors
def query(ctx: click.Context, sql: str, fmt: str) -> None:
    """Run read-only SQL in DuckDB over the published tables (one view per dataset, e.g. orders_daily).

    Only SELECT statements (also WITH, FROM-first, VALUES, DESCRIBE, SUMMARIZE, SHOW) and EXPLAIN
    of one are accepted; DuckDB runs sandboxed: it reads the warehouse and no other file, writes
    nothing, and cannot ATTACH, INSTALL, LOAD or change settings (exit 2)."""
    from lakepub import quick

    quick_text = quick.query(ctx.obj["workspace"], sql, fmt)  # lakepub/quick: None = the full path runs
    if quick_text is not None:
        click.echo(quick_text)
        return
    stamp = quick.stamp(ctx.obj["workspace"])  # before the configuration loads
    ws = _ws(ctx)
    result = ws.query(sql)
    quick.remember(ws, stamp)
    click.echo(output.render_query(result, fmt))


@main.command()
@click.argument("dataset", required=False)
@click.option("--landing", default=None, help="Landing folder to measure the backlog of (default: the source's).")
@click.option("--as-of", "as_of", default=None, metavar="TIME",
              help="Judge the contract's freshness at this ISO 8601 instant (UTC if no offset; default: now).")
@format_option
@click.pass_context
@handle_errors
def status(ctx: click.Context, dataset: str | None, landing: str | None, as_of: str | None, fmt: str) -> None:
    """Published snapshot, positions, partitions, totals, counts (rejected events included),
    landing backlog and, where the contract promises it, freshness (on time / late by how much)."""
    from lakepub import quick

    quick_text = quick.status(ctx.obj["workspace"], dataset, landing, as_of, fmt)  # None: the full path runs
    if quick_text is not None:
        click.echo(quick_text)
        return
    from lakepub import reports

    from lakepub.lifecycle.retirement import retired_names, retirement_note

    stamp = quick.stamp(ctx.obj["workspace"])  # before the configuration loads
    ws = _ws(ctx)
    audit_before = quick.audit_location(ws) if landing is None else None
    hidden: set[str] = set()
    if dataset:
        names = [dataset]
    else:  # retired datasets are hidden from the listing (named, they are shown with a note)
        hidden = set(retired_names(ws))
        names = [n for n in sorted(ws.config.datasets) if n not in hidden]
    now = _instant(as_of) if as_of else None
    statuses = [reports.status(ws, name, landing=landing, now=now) for name in names]
    quick.remember(ws, stamp)
    if landing is None:  # stored for the quick path under the snapshots it was computed on
        for s in statuses:
            quick.remember_status(ws, s, ws.dataset(s.dataset), stamp, audit_before)
    if dataset:
        statuses = [retirement_note(ws, s) for s in statuses]
    if fmt == "json":
        click.echo(output.to_json([s.as_dict() for s in statuses]))
        return
    if not statuses:  # a catalog_dir spelt wrong looked like a workspace with nothing published
        folder = ws.config.root / ws.config.catalog_dir / "datasets"
        why = (f"no dataset to show: every dataset of {folder} is retired ({', '.join(sorted(hidden))}; "
               "`lakepub restore DATASET` brings one back)" if hidden else
               f"no dataset to show: {folder} defines none (lakepub.yaml's catalog_dir names the catalog folder)")
        logging.getLogger("lakepub.cli").warning("%s", why, extra={"_text": why})  # -q, --log-format json
    for s in statuses:
        click.echo(reports.status_text(s))


def _instant(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: its UTC instant falls before year 1 or after 9999
        raise UserError(f"--as-of: {text!r} is not an ISO 8601 instant from year 1 to 9999 in UTC "
                        "(e.g. 2026-12-01T08:00:00Z)") from None


@main.command()
@click.argument("dataset")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show only the newest N publishes.")
@format_option
@click.pass_context
@handle_errors
def log(ctx: click.Context, dataset: str, limit: int | None, fmt: str) -> None:
    """Publish history of DATASET, newest first."""
    from lakepub import quick
    from lakepub.report_rows import log_text

    quick_text = quick.log(ctx.obj["workspace"], dataset, limit, fmt)  # None: the full path runs
    if quick_text is not None:
        click.echo(quick_text)
        return
    from lakepub import reports

    stamp = quick.stamp(ctx.obj["workspace"])  # before the configuration loads
    ws = _ws(ctx)
    entries = reports.log(ws, dataset, limit)
    quick.remember(ws, stamp)
    if fmt == "json":
        click.echo(output.to_json([e.as_dict() for e in entries]))
        return
    click.echo(log_text(entries))


@main.command()
@click.argument("dataset")
@click.option("--deep", is_flag=True, help="Also recompute the whole table from the ledger, and check the ledger's key index holds exactly its rows.")
@format_option
@click.pass_context
@handle_errors
def verify(ctx: click.Context, dataset: str, deep: bool, fmt: str) -> None:
    """Recompute the checksum of every published partition; exit 1 on any mismatch."""
    from lakepub import reports

    report = reports.verify(_ws(ctx), dataset, deep=deep)
    if fmt == "json":
        click.echo(output.to_json(report.as_dict()))
    elif report.ok:
        click.echo(f"ok: {report.partitions_checked} partition(s) of {dataset} match their checksums"
                   + (" and the ledger" if deep else ""))
    else:
        for line in report.mismatches:
            click.echo(f"mismatch: {line}", err=True)
    reports.raise_if_failed(report)


@main.command()
@click.argument("dataset")
@click.option("--dry-run", is_flag=True, help="Only report what compaction would do.")
@click.option("--deletes-only", is_flag=True, help="Only fold the delete files of merge-on-read datasets; "
              "leave the ledger as it is.")
@click.option("--fold-threshold", type=click.FloatRange(0.0, 1.0), default=0.1, show_default=True,
              help="Rewrite a data file of a merge-on-read dataset once this fraction of its rows is deleted.")
@format_option
@click.pass_context
@handle_errors
def compact(ctx: click.Context, dataset: str, dry_run: bool, deletes_only: bool, fold_threshold: float,
            fmt: str) -> None:
    """Compact the ledger of DATASET's entity: one row per entity with a durable version floor, in
    few files (every dataset of the entity names the compacted ledger).

    Versions at or below an entity's floor stay rejected after compaction (a replay with another
    payload is still a conflict), so replaying old events changes nothing and tombstones keep holding. It also writes a complete key index of the
    compacted ledger (key_index: true; an S3 warehouse keeps it through the local cache), so a ledger that had none is indexed again.

    Then every merge-on-read dataset of the entity has its deletes folded: data files with at least
    --fold-threshold of their rows deleted (and small files of a partition) are rewritten without
    them, and delete files naming no live data file are dropped; publishes may run meanwhile."""
    from lakepub.maintenance.compact import compact_ledger
    from lakepub.maintenance.fold import fold_deletes, needs_folding

    if not 0.0 <= fold_threshold <= 1.0:  # nan passes click's FloatRange: refused before the ledger is compacted
        raise UserError(f"--fold-threshold must be between 0 and 1, got {fold_threshold}; nothing was compacted")
    ws = _ws(ctx)
    result = None if deletes_only else compact_ledger(ws, dataset, dry_run=dry_run)
    published = ws.published_tables()
    folds = [fold_deletes(ws, name, threshold=fold_threshold, dry_run=dry_run)
             for name in ws.config.group(dataset).dataset_names if name in published
             and needs_folding(ws, name)]
    if fmt == "json":
        out = result.as_dict() if result is not None else {"dataset": dataset}
        click.echo(output.to_json({**out, "deletes": [f.as_dict() for f in folds]}))
        return
    if result is not None:
        verb = "would compact" if dry_run else "compacted"
        click.echo(f"{verb} {dataset} ledger: {result.rows_before} -> {result.rows_after} rows, "
                   f"{result.files_before} -> {result.files_after} files")
    for fold in folds:
        click.echo(fold.line())


@main.command()
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=Path("lakepub-demo"),
              show_default=True, help="Workspace folder to create (must not hold a workspace yet).")
@click.option("--events", type=click.IntRange(min=1000), default=200_000, show_default=True)
@click.option("--days", type=click.IntRange(min=1), default=90, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--max-batch", type=click.IntRange(min=1), default=50_000, show_default=True)
@handle_errors
def demo(folder: Path, events: int, days: int, seed: int, max_batch: int) -> None:
    """The main job end to end: generate a realistic order stream, publish it, show the result."""
    from lakepub.demo import run_demo

    run_demo(folder, events=events, days=days, seed=seed, max_batch=max_batch, echo=click.echo)


from lakepub.maintenance.cli import register_cli  # noqa: E402 - adds `janitor`, kept in its package

register_cli(main)
from lakepub.contract.cli import register_cli as register_contract_cli  # noqa: E402 - `contract`, `consumers`

register_contract_cli(main)

from lakepub.lineage.cli import register_cli as _lineage  # noqa: E402 - explain, diff, report

_lineage(main)
from lakepub.ops.cli import register_cli as _ops  # noqa: E402 - metrics, tables, catalog-config

_ops(main)

from lakepub.contract.gates_cli import register_cli as _gates  # noqa: E402 - rejects

_gates(main)
from lakepub.derive.cli import register_cli as _derive  # noqa: E402 - plan, reconcile

_derive(main)

from lakepub.lifecycle.cli import register_cli as _lifecycle  # noqa: E402 - state, wait, retire, restore

_lifecycle(main)

if __name__ == "__main__":
    main()
