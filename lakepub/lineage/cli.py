"""``lakepub explain``, ``lakepub diff`` and ``lakepub report``: registered on the main group by
``register_cli(main)``. Only click is imported here; the commands import what they read with
(pyiceberg, pyarrow, DuckDB) when they run, so ``lakepub --help`` does not pay for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lakepub.cli_support import format_option, handle_errors


def _ws(ctx: click.Context):
    from lakepub.workspace import Workspace

    return Workspace.open((ctx.obj or {}).get("workspace", Path(".")))


def _show(value: Any) -> str:
    from lakepub.lineage.explain import show

    return show(value)


def _pairs(values: dict[str, Any] | None) -> str:
    if values is None:
        return "-"
    return " ".join(f"{k}={_show(v)}" for k, v in values.items())


def _contribution(c) -> str:
    if c is None:
        return "(not live)"
    return f"[{c.partition}] {_pairs(c.group)} {_pairs(c.measures)}".strip()


@click.command()
@click.argument("dataset")
@click.option("--partition", "partition", required=True,
              help="Partition label as Iceberg shows it: 2025-10 for month(day), 2025-10-03 for day(day), "
                   "3 for a bucket, the value for identity, 'all' when unpartitioned.")
@click.option("--group", "group", default=None,
              help="Only this group of the partition: the value of a one-column group_by (or of a one-field "
                   "key for a current-state dataset), else col=value,col=value.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Show only the newest N publishes that changed it (default: all retained).")
@format_option
@click.pass_context
@handle_errors
def explain(ctx: click.Context, dataset: str, partition: str, group: str | None, limit: int | None, fmt: str) -> None:
    """The publishes that changed PARTITION of DATASET, newest first: batch identity, source
    positions, and the input events (key, version, old -> new partition/group and measures) that
    moved it. After `lakepub compact` the versions still kept are listed and the output says what
    was compacted away; publishes expired by the janitor are not listed."""
    from lakepub import output
    from lakepub.lineage.explain import explain as run

    result = run(_ws(ctx), dataset, partition, group)
    shown = result.changes[:limit] if limit else result.changes
    if fmt == "json":
        click.echo(output.to_json({**result.as_dict(), "changes": [c.as_dict() for c in shown],
                                   "changes_total": len(result.changes)}))
        return
    where = f"partition {result.partition}" + (f", group {_pairs(result.group)}" if result.group else "")
    lines = [f"{result.dataset} {where}: {len(result.changes)} publish(es) changed it, newest first "
             f"(of {result.publishes_retained} retained)" + (f"; the newest {len(shown)} shown" if limit else "")]
    for change in shown:
        p = change.publish
        batch = p.record.batch
        lines.append("")
        lines.append(f"snapshot {p.snapshot_id} at {p.committed_at}  {p.kind} {p.batch_id[:12]}  "
                     f"source {batch.get('source')} {output.vector(batch.get('start') or {})} -> "
                     f"{output.vector(batch.get('end') or {})}"
                     + ("" if change.rewrote else "  (partition not rewritten: the changes cancel out)"))
        if change.note:
            lines.append(f"  note: {change.note}")
        if change.events:
            rows = [[_pairs(e.key), e.version, e.old_version if e.old_version is not None else "-",
                     "delete" if e.deleted else "", _contribution(e.old), _contribution(e.new)] for e in change.events]
            lines.append("  " + output.table(["key", "version", "was", "", "old", "new"], rows).replace("\n", "\n  "))
    for note in result.notes:
        lines.append(f"note: {note}")
    click.echo("\n".join(lines))


@click.command()
@click.argument("dataset")
@click.argument("snapshot_a")
@click.argument("snapshot_b")
@format_option
@click.pass_context
@handle_errors
def diff(ctx: click.Context, dataset: str, snapshot_a: str, snapshot_b: str, fmt: str) -> None:
    """Partitions and groups of DATASET added, removed and changed from SNAPSHOT_A to SNAPSHOT_B,
    with measure deltas (B - A). A snapshot is its id, a batch id prefix (`lakepub log`) or
    'current'."""
    from lakepub import output
    from lakepub.lineage.diff import diff as run

    result = run(_ws(ctx), dataset, snapshot_a, snapshot_b)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    s = result.summary()
    lines = [f"{result.dataset}: snapshot {result.a['snapshot_id']} -> {result.b['snapshot_id']}: "
             f"groups +{s['groups_added']} -{s['groups_removed']} ~{s['groups_changed']}, partitions "
             f"+{s['partitions_added']} -{s['partitions_removed']} ~{s['partitions_changed']}"]
    if result.partitions:
        rows = [[p["partition"], p["status"], p["rows_a"], p["rows_b"], _pairs(p.get("delta"))]
                for p in result.partitions]
        lines += ["", output.table(["partition", "status", "rows A", "rows B", "delta"], rows)]
    if result.groups:
        rows = [[g["partition"], _pairs(g["group"]), g["status"], _pairs(g["a"]), _pairs(g["b"]),
                 _pairs(g["delta"]) if "delta" in g else ",".join(g["changed"])] for g in result.groups]
        lines += ["", output.table(["partition", "group", "status", "A", "B", "delta"], rows)]
    click.echo("\n".join(lines))


@click.command()
@click.argument("datasets", nargs=-1, metavar="[DATASET]...")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=Path("report.html"),
              show_default=True, help="The HTML file to write.")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True,
              help="Publishes shown in the timeline and the recent changes.")
@click.pass_context
@handle_errors
def report(ctx: click.Context, datasets: tuple[str, ...], out: Path, limit: int) -> None:
    """Write one self-contained HTML page (inline SVG, no script, no network) for DATASET
    (default: every published dataset): its measures over the partition column, a timeline of
    publishes (size, duration, lag where recorded), quality results (verify, refusals, duplicates)
    and recent changes."""
    from lakepub.report.html import write_report

    path, shown = write_report(_ws(ctx), list(datasets), out, limit=limit)
    click.echo(f"wrote {path} ({', '.join(shown) or 'no published dataset'})")


def register_cli(main: click.Group) -> None:
    """Add ``explain``, ``diff`` and ``report`` to the ``lakepub`` group (idempotent)."""
    for name, command in (("explain", explain), ("diff", diff), ("report", report)):
        if name not in main.commands:
            main.add_command(command, name)
