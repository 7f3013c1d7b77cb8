"""``lakepub plan`` and ``lakepub reconcile``: registered on the main group by ``register_cli(main)``.

Only click is imported here; each command imports the derive package (DuckDB, pyiceberg,
sqlglot) when it runs, so ``lakepub --help`` does not pay for it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from lakepub.cli_support import format_option, handle_errors

_BATCH_HELP = "Pack partitions into windows of N partitions (default 366: a year of days)."
_DAYS_HELP = ("Pack partitions into windows spanning N calendar days (datasets partitioned by day, month or "
              "year; others by partitions).")


def _ws(ctx: click.Context):
    from lakepub.workspace import Workspace

    return Workspace.open((ctx.obj or {}).get("workspace", Path(".")))


def _batching(batch_days: int | None, batch_partitions: int | None):
    from lakepub.derive.state import Batching
    from lakepub.errors import UserError

    if batch_days and batch_partitions:
        raise UserError("give --batch-days or --batch-partitions, not both")
    return Batching(partitions=batch_partitions, days=batch_days)


@click.command(short_help="Desired vs published data versions and partitions.")
@click.argument("datasets", nargs=-1, metavar="[DATASET]...")
@click.option("--batch-partitions", type=click.IntRange(min=1), default=None, metavar="N", help=_BATCH_HELP)
@click.option("--batch-days", type=click.IntRange(min=1), default=None, metavar="N", help=_DAYS_HELP)
@format_option
@click.pass_context
@handle_errors
def plan(ctx: click.Context, datasets: tuple[str, ...], batch_partitions: int | None, batch_days: int | None,
         fmt: str) -> None:
    """For each DATASET (default: all): its published (current) and desired data version, whether it
    gets a new one and why (breaking, non-breaking, untouched, new), and for derived datasets the
    windows of missing or stale partitions with stable ids ('lakepub reconcile DATASET --window ID'
    computes one; pass it the same --batch-* options). Reads only metadata; writes nothing."""
    from lakepub import output
    from lakepub.derive.state import Context, as_json, plan as make_plan

    batching = _batching(batch_days, batch_partitions)
    plans = make_plan(Context(_ws(ctx)), list(datasets), batching)
    if fmt == "json":
        click.echo(output.to_json(as_json(plans, batching)))
        return
    for p in plans:
        current = (p.current_version or "-")[:19]
        line = f"{p.dataset} ({p.kind}): {p.change}, data version {current}"
        if p.current_version != p.desired_version:
            line += f" -> {p.desired_version[:19]}"
        click.echo(line)
        for reason in p.reasons:
            click.echo(f"  because {reason}")
        if p.blocked:
            click.echo(f"  blocked: {p.blocked}")
        for table in p.abandoned:
            fix = f"'lakepub {'reconcile' if p.kind == 'derived' else 'rebuild'} {p.dataset}' drops it"
            click.echo(f"  abandoned rebuild table {table} (built for neither data version): {fix}")
        for w in p.pending:
            kinds = sorted({why.split(":")[0] for why in w.why.values()})
            click.echo(f"  window {w.id}: {w.partitions[0]}..{w.partitions[-1]}: {len(w.pending)} of "
                       f"{len(w.partitions)} partition(s) to compute ({', '.join(kinds)})")
        if p.kind == "derived" and not p.blocked and not p.pending:
            click.echo("  up to date")


@click.command(short_help="Compute missing and stale partitions of derived datasets.")
@click.argument("datasets", nargs=-1, metavar="[DATASET]...")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Prepare windows in N threads (query, checksums, files); commits stay one at a time.")
@click.option("--batch-partitions", type=click.IntRange(min=1), default=None, metavar="N", help=_BATCH_HELP)
@click.option("--batch-days", type=click.IntRange(min=1), default=None, metavar="N", help=_DAYS_HELP)
@click.option("--window", default=None, metavar="ID", help="Compute exactly this window of DATASET (an id from "
              "'lakepub plan --format json', with the same --batch-* options).")
@format_option
@click.pass_context
@handle_errors
def reconcile(ctx: click.Context, datasets: tuple[str, ...], workers: int, batch_partitions: int | None,
              batch_days: int | None, window: str | None, fmt: str) -> None:
    """Bring DATASET (default: every derived dataset; named ones with the derived datasets they read)
    to its desired state: compute its missing and stale partitions (and its 'lookback' newest
    ones) window by window, upstreams first, each window a query over the inputs' published
    snapshots committed atomically with its data version and input fingerprints. A run that finds
    nothing to do writes nothing.

    On a terminal a progress bar shows on stderr; otherwise one line per committed window."""
    from lakepub import output
    from lakepub.derive.reconcile import reconcile as run

    bar: Any = None
    quiet = (ctx.obj or {}).get("quiet", False)
    lines = fmt != "json" and not sys.stdout.isatty()

    def on_plan(p) -> None:
        nonlocal bar
        if bar is not None:
            bar.__exit__(None, None, None)
            bar = None
        if p.pending and fmt != "json" and not lines and not quiet:
            bar = click.progressbar(length=len(p.pending), label=f"reconciling {p.dataset}", file=sys.stderr,
                                    show_pos=True)
            bar.__enter__()

    def on_window(r) -> None:
        if bar is not None:
            bar.update(1)
        if lines:
            click.echo(f"window {r.window} {r.dataset}: {r.partitions[0]}..{r.partitions[-1]} "
                       f"({len(r.partitions)} partition(s)), {r.rows} rows, snapshot {r.snapshot_id}, "
                       f"{r.seconds:.2f} s")

    def on_drop(dataset: str, tables: list[str]) -> None:
        if not quiet:
            click.echo(f"{dataset}: dropped abandoned rebuild table(s) {', '.join(tables)} (built for neither its "
                       "published nor its desired data version; the janitor deletes their files)", err=True)

    try:
        results = run(_ws(ctx), list(datasets), batching=_batching(batch_days, batch_partitions), workers=workers,
                      window=window, on_plan=on_plan, on_window=on_window, on_drop=on_drop)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    done = [r for r in results if r.partitions]
    if fmt == "json":
        click.echo(output.to_json({"windows": [r.as_dict() for r in done]}))
        return
    if not done:
        click.echo("nothing to do: every derived partition is at its desired data version and inputs")
        return
    names = sorted({r.dataset for r in done})
    click.echo(f"computed {len(done)} window(s), {sum(len(r.partitions) for r in done)} partition(s), "
               f"{sum(r.rows for r in done)} rows into {', '.join(names)}")


@click.command(short_help="Recompute chosen partitions of a derived dataset in place.")
@click.argument("dataset")
@click.option("--from", "first", required=True, metavar="P1", help="First partition label (e.g. 2025-10).")
@click.option("--to", "last", required=True, metavar="P2", help="Last partition label, inclusive.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Prepare windows in N threads (query, checksums, files); commits stay one at a time.")
@click.option("--batch-partitions", type=click.IntRange(min=1), default=None, metavar="N", help=_BATCH_HELP)
@click.option("--batch-days", type=click.IntRange(min=1), default=None, metavar="N", help=_DAYS_HELP)
@format_option
@click.pass_context
@handle_errors
def backfill(ctx: click.Context, dataset: str, first: str, last: str, workers: int, batch_partitions: int | None,
             batch_days: int | None, fmt: str) -> None:
    """Recompute DATASET's partitions P1..P2 (labels, inclusive) in place under its published data
    version, whatever their recorded state (after an input was repaired outside lakepub); every
    other partition is left as it is. Refused (exit 3) while the dataset has a new data version
    pending: 'lakepub reconcile' moves it first."""
    from lakepub import output
    from lakepub.derive.reconcile import backfill as run

    lines = fmt != "json"

    def on_window(r) -> None:
        if lines:
            click.echo(f"window {r.window} {r.dataset}: {r.partitions[0]}..{r.partitions[-1]} "
                       f"({len(r.partitions)} partition(s)), {r.rows} rows, snapshot {r.snapshot_id}, "
                       f"{r.seconds:.2f} s")

    results = run(_ws(ctx), dataset, first, last, batching=_batching(batch_days, batch_partitions), workers=workers,
                  on_window=on_window)
    if fmt == "json":
        click.echo(output.to_json({"windows": [r.as_dict() for r in results]}))
        return
    click.echo(f"backfilled {sum(len(r.partitions) for r in results)} partition(s) of {dataset} in "
               f"{len(results)} window(s)")


@click.command(short_help="Rebuild a base dataset under its changed definition.")
@click.argument("dataset")
@format_option
@click.pass_context
@handle_errors
def rebuild(ctx: click.Context, dataset: str, fmt: str) -> None:
    """Rebuild base DATASET, whose definition (projection, partition) or contract changed since it was
    published, from its entity's ledger into an isolated table, audit it, and swap it in with one
    catalog transaction that asserts neither the table nor the ledger moved; readers see the old
    rows until then. Derived datasets are rebuilt by 'lakepub reconcile'."""
    from lakepub import output
    from lakepub.derive.rebuild_base import rebuild_base

    def on_drop(name: str, tables: list[str]) -> None:
        if not (ctx.obj or {}).get("quiet", False):
            click.echo(f"{name}: dropped abandoned rebuild table(s) {', '.join(tables)} (built for neither its "
                       "published nor its desired data version; the janitor deletes their files)", err=True)

    result = rebuild_base(_ws(ctx), dataset, on_drop=on_drop)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict() if result else {"dataset": dataset, "rebuilt": False}))
    elif result is None:
        click.echo(f"{dataset} is already published under its definition: nothing to rebuild")
    else:
        click.echo(f"rebuilt {dataset}: {result.partitions} partition(s), {result.rows} rows, data version "
                   f"{(result.previous_version or '-')[:19]} -> {result.data_version[:19]}")


def register_cli(main: click.Group) -> None:
    """Add ``plan``, ``reconcile``, ``backfill`` and ``rebuild`` to the ``lakepub`` group (idempotent)."""
    for name, command in (("plan", plan), ("reconcile", reconcile), ("backfill", backfill), ("rebuild", rebuild)):
        if name not in main.commands:
            main.add_command(command, name)
