"""Adversarial review of derived datasets (issue 14): each test pins one defect found and fixed.

The oracle is always the derived query run by DuckDB over the published upstreams
(``lakepub query``'s views): after ``reconcile`` exits 0 the derived table must equal it.
"""

from __future__ import annotations

from pathlib import Path

from test_derive import FIRST, MONTHLY, _define, _ok, _oracle, _plan, _publish, _rows

RATES = {"name": "order_rates",  # only an `all` input: one window; a float identity partition
         "projection": {"kind": "sql", "inputs": {"orders_daily": "all"},
                        "query": "SELECT CAST(cents / 1000 AS FLOAT) AS rate, count(*) AS n FROM orders_daily "
                                 "GROUP BY 1"},
         "partition": "identity(rate)"}
RATES_COPY = {"name": "order_rates_copy",  # reads order_rates partition by partition (identity)
              "projection": {"kind": "sql", "inputs": {"order_rates": "identity(rate)"},
                             "query": "SELECT rate, n FROM order_rates"},
              "partition": "identity(rate)"}


def test_identity_partitions_of_a_float_read_their_rows(ws_path: Path, cli):
    # Iceberg labels the float 0.1 '0.10000000149011612' (its double value); the window filter
    # compared that with DuckDB's CAST(rate AS VARCHAR) '0.1': no row matched, every partition
    # was published empty and reconcile exited 0.
    _publish(cli, ws_path, FIRST)
    _define(ws_path, RATES, RATES_COPY)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM order_rates ORDER BY 1") == _oracle(cli, RATES)
    got = _rows(cli, "SELECT * FROM order_rates_copy ORDER BY 1")
    assert len(got) == 5 and got == _oracle(cli, RATES_COPY)
    assert all(p["pending_partitions"] == 0 for p in _plan(cli).values())
