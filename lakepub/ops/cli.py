"""``lakepub metrics``, ``lakepub tables`` and ``lakepub catalog-config``: registered on the main
group by ``register_cli(main)``. Only click is imported here; each command imports what it reads
with (prometheus_client, pyiceberg, DuckDB) when it runs, so ``lakepub --help`` does not pay for it."""

from __future__ import annotations

from pathlib import Path

import click

from lakepub.cli_support import format_option, handle_errors


def _ws(ctx: click.Context):
    from lakepub.workspace import Workspace

    return Workspace.open((ctx.obj or {}).get("workspace", Path(".")))


@click.command(short_help="Metrics per dataset, Prometheus or JSON.")
@click.argument("datasets", nargs=-1, metavar="[DATASET]...")
@click.option("--format", "fmt", type=click.Choice(["prometheus", "json"]), default="prometheus", show_default=True,
              help="Prometheus text exposition (format 0.0.4) or JSON.")
@click.option("--textfile", "textfile", type=click.Path(file_okay=False, exists=True, writable=True, path_type=Path),
              default=None, metavar="DIR", help="Write the Prometheus text to DIR/lakepub.prom atomically (for node_exporter's "
                                 "textfile collector) instead of printing it.")
@click.pass_context
@handle_errors
def metrics(ctx: click.Context, datasets: tuple[str, ...], fmt: str, textfile: Path | None) -> None:
    """Metrics of DATASET (default: every dataset): published snapshot id and data version, positions
    and lag per source partition (records behind landing, age of the oldest unprocessed record from
    its segment's modification time), partitions, rows, totals of events, duplicates, stale versions,
    deletes, quality rejects, refused conflicts and stale starts, last publish duration and commit
    retries. Names are lakepub_*, labelled dataset (and source, partition)."""
    from lakepub import output
    from lakepub.ops.metrics import gather, render, write_textfile

    figures = gather(_ws(ctx), list(datasets))
    if textfile is not None:
        path = write_textfile(textfile, render(figures))
        click.echo(f"wrote {path} ({len(figures)} dataset(s))")
    elif fmt == "json":
        click.echo(output.to_json([f.as_dict() for f in figures]))
    else:
        click.echo(render(figures), nl=False)


@click.command(short_help="Published tables and metadata locations.")
@format_option
@click.pass_context
@handle_errors
def tables(ctx: click.Context, fmt: str) -> None:
    """Every published table (each dataset's, and each entity's ledger) with its Iceberg identifier,
    the catalog's current metadata location, snapshot id and data version: what an outside reader
    opens (DuckDB: iceberg_scan('<metadata_location>')). A ledger's snapshot is the one its
    datasets' publish records (under the ordered commit its main may be one append ahead)."""
    from lakepub import output
    from lakepub.ops.tables import published_tables

    found = published_tables(_ws(ctx))
    if fmt == "json":
        click.echo(output.to_json([t.as_dict() for t in found]))
        return
    if not found:
        click.echo("no published table yet; run 'lakepub run DATASET' or 'lakepub publish' first")
        return
    rows = [[t.kind, t.identifier, t.snapshot_id, (t.data_version or "-")[:19], t.metadata_location] for t in found]
    click.echo(output.table(["kind", "identifier", "snapshot", "data version", "metadata location"], rows))


@click.command("catalog-config", short_help="Resolved pyiceberg catalog configuration.")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Output format.")
@click.option("--show-secrets", is_flag=True,
              help="Print secret values (passwords, secret keys, tokens) instead of ***.")
@click.pass_context
@handle_errors
def catalog_config(ctx: click.Context, fmt: str, show_secrets: bool) -> None:
    """The workspace's pyiceberg catalog configuration, resolved: name, type, uri, warehouse, ...
    with ${VAR} expanded and relative paths made absolute, so that
    pyiceberg.catalog.load_catalog(config.pop("name"), **config) works from any folder."""
    from lakepub import output
    from lakepub.ops.catalog_config import resolved

    config, hidden = resolved(_ws(ctx).config, show_secrets=show_secrets)
    if fmt == "json":
        click.echo(output.to_json(config))
    else:
        import yaml

        click.echo(yaml.safe_dump(config, sort_keys=False, default_flow_style=False), nl=False)
    if hidden:
        click.echo(f"note: {', '.join(hidden)} redacted as ***; --show-secrets prints them", err=True)


def register_cli(main: click.Group) -> None:
    """Add ``metrics``, ``tables`` and ``catalog-config`` to the ``lakepub`` group (idempotent)."""
    for name, command in (("metrics", metrics), ("tables", tables), ("catalog-config", catalog_config)):
        if name not in main.commands:
            main.add_command(command, name)
