"""The README's "Read it from anywhere" snippets, executed as written.

Every fenced block that follows a ``<!-- tested-reader NAME -->`` line in README.md is run in a
fresh Python process (the way a user would paste it), in the folder holding a workspace named
``shop`` whose stream has corrections that move orders between days and months, duplicates, late
versions and deletes; each snippet leaves ``cents, orders`` and they must equal what
``lakepub query`` reads from the published snapshot. The Spark block is documented as untested
and carries no marker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakepub.generate import generate_stream
from lakepub.init import init_workspace
from lakepub.workspace import Workspace

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"^<!-- tested-reader (\S+) -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def snippets() -> dict[str, str]:
    return {name: code for name, code in MARKER.findall(README.read_text())}


def test_the_readme_has_the_reader_snippets():
    assert sorted(snippets()) == ["duckdb", "polars", "pyiceberg"]
    assert "spark.sql.catalog.lakepub.catalog-impl=org.apache.iceberg.jdbc.JdbcCatalog" in README.read_text()


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> tuple[Path, tuple[int, int]]:
    folder = tmp_path_factory.mktemp("readers")
    ws_root = folder / "shop"
    init_workspace(ws_root)
    stats = generate_stream(ws_root / "landing" / "orders", events=3000, partitions=2, days=70, seed=11,
                            segment_size=500)
    assert stats.corrections and stats.duplicates and stats.deletes and stats.late_versions
    ws = Workspace.open(ws_root)
    ws.run("orders_daily", max_batch=700)
    [(cents, orders)] = [tuple(r.values()) for r in
                         ws.query("SELECT sum(cents) AS c, sum(orders) AS o FROM orders_daily").to_pylist()]
    return folder, (int(cents), int(orders))


@pytest.mark.parametrize("name", ["duckdb", "pyiceberg", "polars"])
def test_reader_snippet_reads_what_lakepub_query_reads(shop, name):
    folder, expected = shop
    code = snippets()[name] + "\nimport json as _j; print(_j.dumps([int(cents), int(orders)]))\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "POLARS_ICEBERG_PLANNER": "pyiceberg"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert tuple(json.loads(proc.stdout.strip().splitlines()[-1])) == expected
