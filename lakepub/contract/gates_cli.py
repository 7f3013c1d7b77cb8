"""``lakepub rejects DATASET``: the events the contract's lenient publish gates kept out of the
published data (``contract/gates.py``), read from the entity's rejects table through DuckDB.
Registered on the main group by ``register_cli(main)``; DuckDB is imported when it runs."""

from __future__ import annotations

from pathlib import Path

import click

from lakepub.cli_support import handle_errors


@click.command()
@click.argument("dataset")
@click.option("--batch", "batch", default=None, help="Only the events of this batch (its id or a prefix of it).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show at most N events (newest batches first).")
@click.option("--format", "fmt", type=click.Choice(("table", "csv", "json")), default="table", show_default=True)
@click.pass_context
@handle_errors
def rejects(ctx: click.Context, dataset: str, batch: str | None, limit: int | None, fmt: str) -> None:
    """Rejected events of DATASET's entity, with the rule each broke (rule, column, detail, all the
    rules it broke, the value, its partition, the whole event as JSON), batch and source.

    Only a contract with validation.mode: lenient rejects events (strict refuses the whole batch);
    the table, <entity>__rejects, is committed atomically with the publish that rejected them."""
    from lakepub import duck, output
    from lakepub.store.integrity import check_scannable
    from lakepub.store.rejects import ARROW, load_rejects
    from lakepub.workspace import Workspace

    ws = Workspace.open((ctx.obj or {}).get("workspace", Path(".")))
    group = ws.config.group(dataset)
    table = load_rejects(ws.catalog, ws.config.namespace, group.name)
    if table is None or table.metadata.current_snapshot_id is None:
        result = ARROW.empty_table()
    else:
        check_scannable(table)
        con = duck.connect(ws.config.catalog)
        try:
            where = "WHERE batch_id LIKE ? || '%'" if batch else ""
            sql = (f"SELECT * FROM {duck.scan_sql(table.metadata_location)} {where} "
                   "ORDER BY rejected_at DESC, batch_id, event" + (f" LIMIT {int(limit)}" if limit else ""))
            result = con.execute(sql, [batch] if batch else []).to_arrow_table()
        finally:
            con.close()
    click.echo(output.render_query(result, fmt))


def register_cli(main: click.Group) -> None:
    main.add_command(rejects)
