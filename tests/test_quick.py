"""The quick read path (``lakepub/quick``) prints byte for byte what the full path prints, or declines.

One workspace is driven through the states a user meets (nothing published, several publishes
over two landing partitions, a refused batch, a second entity with a freshness promise, a derived
dataset, an evolved contract, a retired dataset, an edited definition) and at each state every
read command is run three times in process: quick path first (it answers or declines: a stored
figure of an older snapshot must not be used), then the full path (``LAKEPUB_QUICK=0``, the
oracle, which also stores what the quick path reuses), then the quick path again, which must
answer (``LAKEPUB_QUICK=trace`` says which path did). The three outputs and exit codes must be
equal. Landing segments are dated 10 days back so their ages print alike.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from conftest import write_jsonl
from lakepub.cli import main

CUSTOMERS = """
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
freshness: "within 2h"
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: string
  mrr_cents: long
  deleted: boolean
"""
MRR = {"name": "customers_mrr", "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
       "projection": {"kind": "aggregate", "group_by": ["country", "plan"],
                      "measures": {"mrr_cents": "sum(mrr_cents)", "customers": "count()"}},
       "partition": "identity(country)"}
ALL = {"name": "customers_all", "source": "customers", "contract": "contracts/customers@v1.0", "entity": "customers",
       "projection": {"kind": "current"}, "partition": "bucket(4, customer_id)"}
MONTHLY = {"name": "orders_monthly",
           "projection": {"kind": "sql", "inputs": {"orders_daily": "month(day)"},
                          "query": "SELECT CAST(date_trunc('month', day) AS DATE) AS month, sum(cents) AS cents, "
                                   "sum(orders) AS orders FROM orders_daily GROUP BY 1"},
           "partition": "month(month)"}
QUERIES = ("SELECT count(*) AS n, sum(cents) AS cents, min(day) AS first FROM orders_daily",
           "SELECT * FROM orders_daily ORDER BY day LIMIT 4",
           "SELECT 1.5::DOUBLE AS x, 'a' AS y, true AS z, day::TIMESTAMP AS t FROM orders_daily LIMIT 1")
TEN_DAYS = 10 * 86400


def _invoke(root: Path, args: list[str], quick: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["-w", str(root), *args], env={"LAKEPUB_QUICK": quick}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def _masked(out: str) -> str:
    """Landing ages move with the clock between two runs: rounded to minutes in JSON."""
    return re.sub(r'("oldest_age_s": |"p\d": )(\d{5,}\.\d+)', lambda m: m.group(1) + str(round(float(m.group(2)) / 60)),
                  out)


def same(root: Path, *args: str, answers: bool = True) -> str:
    """Quick (answering or declining), full, quick again: equal output and exit code; the second quick
    run answers itself unless ``answers`` is False or the command fails (errors are the full path's)."""
    first = _invoke(root, list(args), "trace")
    full = _invoke(root, list(args), "0")
    again = _invoke(root, list(args), "trace")
    for got in (first, again):
        assert got[0] == full[0], (args, got, full)
        assert _masked(got[1]) == _masked(full[1]), (args, got[1], full[1])
    if answers and full[0] == 0:  # an error is always the full path's
        assert re.search(r"^quick \w+: answered", again[2], re.M), (args, again[2])
        assert again[2].replace(again[2].splitlines()[0] + "\n", "", 1) == full[2], (args, again[2], full[2])
    return full[1]


def reads(root: Path, *datasets: str, as_of: str = "2030-01-01T00:00:00Z") -> None:
    same(root, "status")
    same(root, "status", "--format", "json")
    for name in datasets:
        same(root, "status", name, "--format", "json", "--as-of", as_of)
        same(root, "status", name)
        same(root, "log", name)
        same(root, "log", name, "--limit", "2", "--format", "json")
    for sql in QUERIES:
        for fmt in ("table", "json", "csv"):
            same(root, "query", sql, "--format", fmt)


def _land(root: Path, source: str, partition: str, name: str, events: list[dict]) -> None:
    folder = root / "landing" / source / partition
    folder.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(folder / name, events)
    old = time.time() - TEN_DAYS
    os.utime(path, (old, old))


def _order(oid: str, version: int, day: str, cents: int) -> dict:
    return {"order_id": oid, "version": version, "day": day, "cents": cents, "deleted": False}


def _customer(cid: str, version: int, country: str, plan: str, mrr: int, **extra) -> dict:
    return {"customer_id": cid, "version": version, "country": country, "plan": plan, "mrr_cents": mrr,
            "deleted": False, **extra}


def _ok(root: Path, *args: str) -> str:
    code, out, err = _invoke(root, list(args), "0")
    assert code == 0, (args, out, err)
    return out


def test_quick_and_full_paths_print_the_same_over_a_workspace_life(ws_path: Path):
    root = ws_path
    reads(root)  # nothing published, no landing folder
    same(root, "log", "orders_daily")

    _land(root, "orders", "p0", "00000.jsonl", [_order(f"o{i}", 1, f"2025-0{1 + i % 3}-1{i % 9}", 100 + i)
                                                for i in range(30)])
    _land(root, "orders", "p1", "00000.jsonl", [_order(f"q{i}", 1, "2025-02-01", 7) for i in range(10)])
    reads(root, "orders_daily")  # landed, not published
    _ok(root, "run", "orders_daily", "--max-batch", "12")
    _land(root, "orders", "p0", "00001.jsonl", [_order("o1", 2, "2025-03-03", 5), _order("o2", 2, "2025-01-01", 1)])
    reads(root, "orders_daily")  # several publishes, a backlog of 2

    stale = write_jsonl(root / "stale.jsonl", [_order("z", 1, "2025-01-01", 1)])
    code, _, _ = _invoke(root, ["publish", "orders_daily", "--events", str(stale), "--start", '{"p0": 0}',
                                "--end", '{"p0": 1}'], "0")
    assert code == 3  # a stale start: refused, audited
    _ok(root, "run", "orders_daily")
    out = same(root, "status", "orders_daily")
    assert "stale starts 1" in out

    (root / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CUSTOMERS)
    for d in (MRR, ALL, MONTHLY):
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    _land(root, "customers", "p0", "00000.jsonl", [_customer("c1", 1, "FR", "pro", 1000),
                                                    _customer("c2", 1, "DE", "basic", 200)])
    reads(root, "customers_mrr", "customers_all")  # defined, not published; a derived one not computed
    _ok(root, "run", "customers_mrr")
    _ok(root, "reconcile", "orders_monthly")
    reads(root, "customers_mrr", "customers_all", "orders_daily")
    same(root, "log", "orders_monthly")
    same(root, "query", "SELECT * FROM orders_monthly ORDER BY month", "--format", "json")
    fresh = json.loads(same(root, "status", "customers_all", "--format", "json"))[0]["freshness"]
    assert fresh["state"] == "on time", fresh

    v11 = (CUSTOMERS.replace('version: "1.0"', 'version: "1.1"') + "  referrer: {type: string, nullable: true}\n")
    (root / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(v11)
    for d in (MRR, ALL):
        (root / "catalog" / "datasets" / f"{d['name']}.yaml").write_text(
            yaml.safe_dump({**d, "contract": "contracts/customers@v1.1"}, sort_keys=False))
    _land(root, "customers", "p0", "00001.jsonl", [_customer("c3", 1, "FR", "pro", 5, referrer="ads")])
    _ok(root, "run", "customers_mrr")  # an evolved contract: customers_all gains a column
    reads(root, "customers_all")
    same(root, "query", "SELECT * FROM customers_all ORDER BY customer_id", "--format", "json")

    _ok(root, "retire", "customers_mrr")
    reads(root, "customers_mrr")  # hidden from the listing and queries, named with a note
    assert "customers_mrr" not in same(root, "status")

    text = (root / "catalog" / "datasets" / "orders_daily.yaml").read_text()
    (root / "catalog" / "datasets" / "orders_daily.yaml").write_text(text + "\n# edited\n")
    first = _invoke(root, ["status"], "trace")
    assert "quick status: declined" in first[2]  # the remembered configuration no longer matches
    reads(root, "orders_daily")


def test_errors_are_the_full_paths(ws_path: Path):
    _land(ws_path, "orders", "p0", "00000.jsonl", [_order("a", 1, "2025-01-01", 1)])
    _ok(ws_path, "run", "orders_daily")
    reads(ws_path, "orders_daily")
    for args in (["log", "nope"], ["status", "nope"], ["status", "--as-of", "yesterday"],
                 ["query", "DROP TABLE orders_daily"], ["query", "SELECT * FROM nope"],
                 ["log", "nope", "--format", "json"], ["status", "orders_daily", "--landing", "elsewhere"]):
        same(ws_path, *args, answers=False)
        code, out, err = _invoke(ws_path, args, "trace")
        assert code != 0 or args[-2] == "--landing", (args, out, err)
    assert _invoke(ws_path, ["log", "nope"], "0")[0] == 2


def test_nothing_is_remembered_under_a_key_it_was_not_computed_on(ws_path: Path):
    # a definition edited while the full path loads it, a refused batch landing while status scans:
    # the record and the stored figures are left out (the next full run stores them)
    from lakepub import quick
    from lakepub.quick.catalog import RECORD
    from lakepub.quick.reports import STATUS_DIR
    from lakepub.workspace import Workspace

    _land(ws_path, "orders", "p0", "00000.jsonl", [_order("a", 1, "2025-01-01", 1)])
    _ok(ws_path, "run", "orders_daily")
    stamp = quick.stamp(ws_path)
    ws = Workspace.open(ws_path)
    status = ws.status("orders_daily")
    definition = ws_path / "catalog" / "datasets" / "orders_daily.yaml"
    definition.write_text(definition.read_text() + "\n# edited meanwhile\n")
    quick.remember(ws, stamp)
    assert not (ws_path / RECORD).exists()
    stamp = quick.stamp(ws_path)
    quick.remember(ws, stamp)
    assert (ws_path / RECORD).exists()
    quick.remember_status(ws, status, ws.dataset("orders_daily"), stamp, "file:///elsewhere.metadata.json")
    assert not (ws_path / STATUS_DIR / "orders_daily.json").exists()  # the audit table is not at that location
    quick.remember_status(ws, status, ws.dataset("orders_daily"), stamp, quick.audit_location(ws))
    assert (ws_path / STATUS_DIR / "orders_daily.json").exists()
    assert "quick status: answered" in _invoke(ws_path, ["status", "orders_daily"], "trace")[2]


def test_landing_counts_equal_the_full_paths_on_awkward_segments(tmp_path: Path):
    # blank and whitespace-only lines, a form feed, CRLF, an unterminated tail: quick/reports._records
    # counts as landing.count_records does (stdlib instead of numpy)
    import random

    from lakepub.landing import count_records
    from lakepub.quick.reports import _records

    rng = random.Random(7)
    pieces = [b'{"a": 1}', b"\n", b"\n", b" ", b"\t", b"\r", b"\x0c", b"x"]
    path = tmp_path / "seg.jsonl"
    for _ in range(400):
        path.write_bytes(b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))))
        for last in (False, True):
            assert _records(path, last) == count_records(path).complete(last)[0], (path.read_bytes(), last)
