"""Derived-dataset windows fanned out to 4 processes sharing a PostgreSQL catalog (issue 14).

``lakepub plan --format json`` lists the windows; 4 separate processes each run ``lakepub
reconcile orders_monthly --window ID`` for their share, all at once, so their commits race on
one table (disjoint partitions: each lost race rebases). The result must equal a single-process
``lakepub reconcile`` of the same events on another workspace: the same rows read back by DuckDB
and the same recorded partition checksums; and the plan must then be empty.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakepub.store.layout import summary_id
from lakepub.store.record import recorded_checksums
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

MONTHLY = {"name": "orders_monthly",
           "projection": {"kind": "sql", "inputs": {"orders_daily": "month(day)"},
                          "query": "SELECT CAST(date_trunc('month', day) AS DATE) AS month, sum(cents) AS cents, "
                                   "count(*) AS days FROM orders_daily GROUP BY 1"},
           "partition": "month(month)"}


def _events() -> list[dict]:
    out = []
    for i in range(240):
        month, day = 1 + i % 12, 1 + (i * 7) % 28
        out.append({"order_id": f"o{i}", "version": 1, "day": f"2025-{month:02d}-{day:02d}", "cents": 10 + i,
                    "deleted": False})
    return out


def _cli(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(root), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _prepare(root: Path) -> None:
    events = _events()
    (root / "batch.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (root / "catalog" / "datasets" / "orders_monthly.yaml").write_text(yaml.safe_dump(MONTHLY))
    proc = _cli(root, "publish", "orders_daily", "--events", str(root / "batch.jsonl"), "--start", '{"p0":0}',
                "--end", json.dumps({"p0": len(events)}))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def _state(root: Path) -> tuple[list, dict]:
    with Workspace.open(root) as ws:
        rows = ws.query("SELECT * FROM orders_monthly ORDER BY month").to_pylist()
        table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_monthly"))
        return rows, recorded_checksums(table)


def test_four_processes_on_postgres_end_equal_to_one(pg_url, make_workspace):
    pg = make_workspace({"name": "lakepub", "type": "sql", "uri": pg_url, "warehouse": ".lakepub/warehouse"}, "pg")
    single = make_workspace({"name": "lakepub", "type": "sql", "uri": "sqlite:///.lakepub/catalog.db",
                             "warehouse": ".lakepub/warehouse"}, "single")
    for root in (pg, single):
        _prepare(root)
    proc = _cli(pg, "plan", "orders_monthly", "--batch-partitions", "1", "--format", "json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    windows = [w["id"] for w in json.loads(out)["datasets"][0]["windows"]]
    assert len(windows) == 12
    procs = []
    for k in range(4):  # each process computes its share of the windows, one after the other
        share = windows[k::4]
        code = ("import sys\nfrom click.testing import CliRunner\nfrom lakepub.cli import main\n"
                f"for w in {share!r}:\n"
                f"    r = CliRunner().invoke(main, ['-w', {str(pg)!r}, 'reconcile', 'orders_monthly', "
                "'--batch-partitions', '1', '--window', w])\n"
                "    sys.stdout.write(r.output)\n"
                "    assert r.exit_code == 0, (r.exit_code, r.output, r.exception)\n")
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=dict(os.environ)))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    proc = _cli(single, "reconcile")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert _state(pg) == _state(single)
    with Workspace.open(pg) as ws:  # one snapshot per window: none committed twice, none lost
        table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_monthly"))
        committed = [s.summary.additional_properties.get("lakepub.derive-window") for s in table.snapshots()]
        attempts = [int(s.summary.additional_properties.get("lakepub.commit-attempts", 1)) for s in table.snapshots()]
    assert sorted(committed) == sorted(windows), committed
    print(f"commit attempts of the 12 windows: {attempts}")
    rows, checksums = _state(pg)
    assert len(rows) == 12 and sum(r["cents"] for r in rows) == sum(10 + i for i in range(240))
    proc = _cli(pg, "plan", "orders_monthly", "--format", "json")
    out, _ = proc.communicate(timeout=120)
    assert json.loads(out)["datasets"][0]["pending_partitions"] == 0
