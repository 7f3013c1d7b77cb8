"""``lakepub demo``: the main job end to end on the embedded default.

Creates a workspace, generates a realistic order stream into its landing folder (new orders,
corrections that move days, exact duplicates, late older versions, deletes over 2 partitions),
publishes it with ``run``, then shows the top days, ``status``, a deep ``verify`` and the check
against an independent oracle, and the DuckDB query a user would run next.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import click

from lakepub import output, reports
from lakepub.config import CONFIG_FILE
from lakepub.errors import ConfigError, VerifyFailed
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.init import init_workspace
from lakepub.workspace import Workspace


def run_demo(folder: Path, *, events: int, days: int, seed: int, max_batch: int,
             echo: Callable[[str], None] = print) -> None:
    folder = Path(folder)
    if (folder / CONFIG_FILE).exists():
        raise ConfigError(f"{folder} already holds a workspace; pass --dir with a new folder")
    init_workspace(folder)
    ws = Workspace.open(folder, search_parents=False)
    spec = ws.dataset("orders_daily")
    landing = ws.config.landing_dir(spec.source)

    t0 = time.perf_counter()
    stats = generate_stream(landing, events=events, partitions=2, days=days, seed=seed)
    echo(f"generated {stats.events} events for {stats.orders} orders in {landing} "
         f"({stats.new_orders} new, {stats.corrections} corrections, {stats.duplicates} duplicates, "
         f"{stats.late_versions} late old versions, {stats.deletes} deletes) in {time.perf_counter() - t0:.1f}s")

    t1 = time.perf_counter()
    with click.progressbar(length=stats.events, label="publishing orders_daily", show_pos=True) as bar:
        result = ws.run("orders_daily", max_batch=max_batch, on_batch=lambda r, _: bar.update(r.counts.events))
    elapsed = time.perf_counter() - t1
    echo(f"published {len(result.batches)} batches, {result.events} events in {elapsed:.1f}s "
         f"({result.events / elapsed:,.0f} events/s)")

    echo("\ntop days by amount:")
    top = ws.query("SELECT day, cents, orders FROM orders_daily ORDER BY cents DESC LIMIT 5")
    echo(output.render_query(top, "table"))

    echo("\nstatus:")
    echo(reports.status_text(reports.status(ws, "orders_daily")))

    report = reports.verify(ws, "orders_daily", deep=True)
    reports.raise_if_failed(report)
    expected = oracle_summary(read_stream(landing))
    published = {r["day"]: (r["cents"], r["orders"]) for r in ws.query("SELECT * FROM orders_daily").to_pylist()}
    if published != expected:
        raise VerifyFailed(f"published table differs from the oracle on {len(set(published.items()) ^ set(expected.items()))} day(s)")
    echo(f"\nverify: {report.partitions_checked} partitions match their checksums and the ledger; "
         f"all {len(expected)} days equal an independent oracle")
    echo("\nnext, query it yourself:")
    echo(f"  lakepub -w {folder} query \"SELECT date_trunc('month', day) AS month, sum(cents) AS cents, "
         f"sum(orders) AS orders FROM orders_daily GROUP BY 1 ORDER BY 1\"")
    echo(f"  lakepub -w {folder} log orders_daily --limit 5")
