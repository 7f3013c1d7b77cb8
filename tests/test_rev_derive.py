"""Review of the DuckDB-written derived windows (merge 8d5e32f), through the CLI, the rows read back
by DuckDB and compared with the query run directly over the upstream (the oracle)."""

from __future__ import annotations

import pytest
from test_derive import FIRST, _define, _ok, _order, _publish, _rows

# only `all` inputs: one '*' window; string partitions whose Hive folder names need escaping
WEIRD = {"name": "orders_weird",
         "projection": {"kind": "sql", "inputs": {"orders_daily": "all"},
                        "query": "SELECT CASE cents WHEN 100 THEN 'a/b' WHEN 70 THEN 'x=y' WHEN 5 THEN '%41' "
                                 "WHEN 40 THEN 'é/ü%2F' WHEN 9 THEN '' WHEN 3 THEN '..' ELSE NULL END AS k, "
                                 "sum(cents) AS cents, min(day) AS day FROM orders_daily GROUP BY 1"},
         "partition": "identity(k)"}


def test_escaped_string_partitions_and_an_offline_rebuild_of_a_whole_window(cli, ws_path):
    _publish(cli, ws_path, FIRST + [_order("G", 1, "1969-12-31", 3), _order("Z", 1, "2025-10-21", 7)])
    _define(ws_path, WEIRD)
    _ok(cli("reconcile"))
    oracle = f"SELECT * FROM ({WEIRD['projection']['query']}) ORDER BY all"
    assert _rows(cli, "SELECT * FROM orders_weird ORDER BY all") == _rows(cli, oracle)
    for k in ["a/b", "x=y", "%41", "é/ü%2F", "", ".."]:
        assert len(_rows(cli, f"SELECT * FROM orders_weird WHERE k = '{k}'")) == 1, k
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1", "--format", "json"))
    assert _rows(cli, "SELECT * FROM orders_weird ORDER BY all") == _rows(cli, oracle)
    # a new definition: built offline beside, audited from its rows, swapped in. The audit compared
    # the '*' record (no checksum of its own) and refused every such rebuild (exit 1).
    changed = {**WEIRD, "projection": {**WEIRD["projection"],
                                       "query": WEIRD["projection"]["query"].replace("sum(cents)", "sum(cents) * 2")}}
    _define(ws_path, changed)
    _ok(cli("reconcile"))
    oracle = f"SELECT * FROM ({changed['projection']['query']}) ORDER BY all"
    assert _rows(cli, "SELECT * FROM orders_weird ORDER BY all") == _rows(cli, oracle)
    assert "nothing to do" in _ok(cli("reconcile")).out
    from test_derive_perf import _audit
    from test_review_derive import _foreign_append

    from lakepub.errors import VerifyFailed

    assert _audit(ws_path, "orders_weird") == 7
    _foreign_append(ws_path, "orders_weird", [{"k": "x=y", "cents": 1, "day": None}])
    with pytest.raises(VerifyFailed, match="partition x=y"):  # the audit still catches a changed partition
        _audit(ws_path, "orders_weird")


LONG = {"name": "orders_long",  # a partition value whose escaped Hive folder name is over 255 bytes
        "projection": {"kind": "sql", "inputs": {"orders_daily": "day(day)"},
                       "query": "SELECT day, CASE WHEN cents > 50 THEN repeat('é', 60) || 'x' ELSE 'short' END AS k, "
                                "sum(cents) AS cents FROM orders_daily GROUP BY 1, 2"},
        "partition": "identity(k)"}


@pytest.mark.parametrize("cents", ["sum(cents)", "CAST(sum(cents) AS DOUBLE)"])  # DuckDB's files, pyarrow's
def test_a_partition_value_too_long_for_a_folder_name_is_still_published(cli, ws_path, cents):
    _publish(cli, ws_path, FIRST)
    query = LONG["projection"]["query"].replace("sum(cents)", cents)
    _define(ws_path, {**LONG, "projection": {**LONG["projection"], "inputs": {"orders_daily": "all"}, "query": query}})
    _ok(cli("reconcile"))  # was: internal error: IOException: File name too long (exit 1)
    oracle = f"SELECT * FROM ({query}) ORDER BY all"
    assert _rows(cli, "SELECT * FROM orders_long ORDER BY all") == _rows(cli, oracle)
    _ok(cli("janitor", "--older-than", "0s", "--retain-last", "1"))
    assert _rows(cli, "SELECT * FROM orders_long ORDER BY all") == _rows(cli, oracle)
    assert "nothing to do" in _ok(cli("reconcile")).out


SIGNED = {"name": "orders_signed",  # identity partitions 0.0, -0.0 and NaN of a double (pyarrow's files)
          "projection": {"kind": "sql", "inputs": {"orders_daily": "all"},
                         "query": "SELECT CASE WHEN cents > 50 THEN -0.0::DOUBLE WHEN cents > 8 THEN 0.0::DOUBLE "
                                  "ELSE 'nan'::DOUBLE END AS f, cents, day FROM orders_daily"},
          "partition": "identity(f)"}


def test_partitions_zero_and_negative_zero_keep_their_own_rows(cli, ws_path):
    # the partitions went to the writer as a dict by value: 0.0 and -0.0 are one key, the -0.0
    # rows were written for both and the 0.0 rows lost (exit 0, checksums recorded for them)
    from test_derive_perf import _audit

    _publish(cli, ws_path, FIRST)
    _define(ws_path, SIGNED)
    _ok(cli("reconcile"))
    sql = "SELECT f::VARCHAR AS f, cents, day FROM {} ORDER BY all"
    got = _rows(cli, sql.format("orders_signed"))
    assert got == _rows(cli, sql.format(f"({SIGNED['projection']['query']})"))
    assert [r["f"] for r in got].count("0.0") == 2
    assert _audit(ws_path, "orders_signed") == 5
