"""``lakepub state``, ``wait``, ``retire`` and ``restore``: registered on the main group by
``register_cli(main)``. Only click and lakepub's light modules are imported here; each command
imports the workspace (pyiceberg, DuckDB) when it runs, so ``lakepub --help`` does not pay for it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from lakepub import output
from lakepub.cli_support import format_option, handle_errors
from lakepub.maintenance.durations import parse_duration


def _ws(ctx: click.Context):
    from lakepub.workspace import Workspace

    return Workspace.open((ctx.obj or {}).get("workspace", Path(".")))


@click.command(short_help="Data version, fingerprint, partitions, positions, readiness.")
@click.argument("dataset")
@format_option
@click.pass_context
@handle_errors
def state(ctx: click.Context, dataset: str, fmt: str) -> None:
    """The published state of DATASET, for schedulers and readers: readiness (published,
    never-published, retired, deleting, foreign-head), fingerprint (the published snapshot id),
    data version, last publish time, committed positions, and every published partition with its
    checksum, data version and the snapshot that last rewrote it. --format json is versioned
    ("state_version": 1; see README "Source state, sensors and retiring datasets")."""
    found = _ws(ctx).state(dataset)
    if fmt == "json":
        click.echo(output.to_json(found.as_dict()))
        return
    click.echo(f"{dataset}: {found.readiness}" + (f" ({found.note})" if found.note else ""))
    if found.fingerprint is None:
        return
    click.echo(f"  fingerprint   {found.fingerprint}" + (
        f" (lakepub's last: {found.lakepub_snapshot_id})" if found.lakepub_snapshot_id != found.fingerprint else ""))
    click.echo(f"  data version  {found.data_version or '-'}")
    click.echo(f"  last publish  {found.last_publish_at or '-'}")
    for source, vector in sorted(found.positions.items()):
        click.echo(f"  position      {source}: {output.vector(vector)}")
    rows = [[p.partition, p.checksum[:16], (p.data_version or "-")[:19], p.snapshot_id, p.published_at,
             "yes" if p.empty else ""] for p in found.partitions]
    if rows:
        click.echo(output.table(["partition", "checksum", "data version", "snapshot", "published", "empty"], rows))


@click.command(short_help="Block until a dataset or partition is published (a sensor).")
@click.argument("dataset")
@click.option("--partition", default=None, metavar="P",
              help="Wait for this partition (its label as `lakepub state` shows it, e.g. 2026-01 for month "
                   "partitions); default: the dataset's first published snapshot.")
@click.option("--data-version", "data_version", default=None, metavar="V",
              help="Only at this data version (exact, or a prefix of >= 8 hex digits; 'sha256:' optional).")
@click.option("--timeout", default="30m", show_default=True, help="Give up after this long (exit 6): 0s, 90s, 30m, 2h.")
@click.option("--interval", default="5s", show_default=True, help="Time between two looks at the catalog.")
@format_option
@click.pass_context
@handle_errors
def wait(ctx: click.Context, dataset: str, partition: str | None, data_version: str | None, timeout: str,
         interval: str, fmt: str) -> None:
    """Exit 0 once DATASET (its --partition) is published (at --data-version): for Airflow/Dagster
    sensors and cron chains. Exit 6 when --timeout passes first (distinct from 4, a failed write
    safe to retry, and 3, a refusal: a retired dataset is refused at once); exit 2 for a partition
    label the dataset cannot have. Prints what it waited for and the snapshot that satisfied it."""
    from lakepub.lifecycle.sensor import check_wait, describe_wait

    timeout_s, interval_s = parse_duration(timeout, "--timeout"), parse_duration(interval, "--interval")
    if interval_s <= 0:
        interval_s = 1.0
    ws = _ws(ctx)
    check_wait(ws, dataset, partition, data_version)  # bad input: its one error line, not after the banner
    what = describe_wait(dataset, partition, data_version)
    if not (ctx.obj or {}).get("quiet") and fmt != "json":
        click.echo(f"waiting for {what} (timeout {timeout}, every {interval_s:g} s)", err=True)
    from lakepub.lifecycle.sensor import wait_for

    live = sys.stderr.isatty() and not (ctx.obj or {}).get("quiet")

    def on_poll(seen, left: float) -> None:  # a status line on a terminal (schedulers get the lines above)
        if live:
            click.echo(f"\r  still waiting: {seen.readiness}, snapshot {seen.fingerprint}, {left:.0f} s left ",
                       err=True, nl=False)

    try:
        found = wait_for(ws, dataset, partition=partition, data_version=data_version, timeout_s=timeout_s,
                         interval_s=interval_s, on_poll=on_poll)
    finally:
        if live:
            click.echo("", err=True)
    if fmt == "json":
        click.echo(output.to_json({"waited_for": {"dataset": dataset, "partition": partition,
                                                  "data_version": data_version}, "state": found.as_dict()}))
        return
    part = found.partition(partition) if partition is not None else None
    version = part.data_version if part is not None else found.data_version
    snapshot = part.snapshot_id if part is not None else found.fingerprint
    click.echo(f"ready: {what}: snapshot {snapshot}, data version {version}")


@click.command(short_help="Soft-delete a dataset (hidden, skipped; data kept).")
@click.argument("dataset")
@click.option("--grace", default="7d", show_default=True,
              help="After this long the janitor hard-deletes it (tables, files, and the definitions of it and "
                   "everything downstream): 0s, 12h, 7d, 2w.")
@format_option
@click.pass_context
@handle_errors
def retire(ctx: click.Context, dataset: str, grace: str, fmt: str) -> None:
    """Retire DATASET: hidden from `query` views and the listings (tables, status, metrics, report
    without names), skipped by `run` (exit 0, like a disabled dbt model), publishes into it refused
    (exit 3). No data is removed; `lakepub restore DATASET` undoes it until the janitor deletes it
    after --grace. Recorded on its table in the catalog, so every machine sharing it sees it."""
    result = _ws(ctx).retire(dataset, grace=parse_duration(grace, "--grace"))
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    r = result.retirement
    verb = "retired" if result.changed else "already retired"
    click.echo(f"{verb} {dataset} at {r.as_dict()['at']}; the janitor may hard-delete it after {r.as_dict()['delete_after']}")
    if result.downstream:
        click.echo(f"  downstream (their definitions go with it): {', '.join(result.downstream)}", err=True)


@click.command(short_help="Undo `lakepub retire`.")
@click.argument("dataset")
@format_option
@click.pass_context
@handle_errors
def restore(ctx: click.Context, dataset: str, fmt: str) -> None:
    """Restore a retired DATASET: visible, queried and run again, exactly as it was. Refused
    (exit 3) once the janitor has started hard-deleting it."""
    result = _ws(ctx).restore(dataset)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    click.echo(f"restored {dataset}" if result.changed else f"{dataset} is not retired; nothing to do")


def register_cli(main: click.Group) -> None:
    """Add ``state``, ``wait``, ``retire`` and ``restore`` to the ``lakepub`` group (idempotent)."""
    for command in (state, wait, retire, restore):
        if command.name not in main.commands:
            main.add_command(command)

