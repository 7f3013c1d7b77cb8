"""Bad input (issue 9): exit 2 with one line naming file, line (or row) and field, nothing published.

Every test goes through the CLI; each checks that the published state (the catalog's metadata
pointers) is unchanged after a refusal.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import A1, A2, B1, B2, published_pointers, summary_rows, write_jsonl
from lakepub.cli import main
from lakepub.generate import oracle_summary
from lakepub.workspace import Workspace

GOOD = {"order_id": "a", "version": 1, "day": "2025-01-01", "cents": 5, "deleted": False}


def refused(res, *needles: str) -> None:
    """Exit 2, one line on stderr (no traceback, no 'internal error') holding every needle."""
    assert res.code == 2, (res.code, res.out, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def publish(cli, path: Path, end: dict, *extra: str):
    return cli("publish", "orders_daily", "--events", str(path), "--start", "{}", "--end", json.dumps(end), *extra)


def parquet(path: Path, **columns: pa.Array) -> Path:
    base = {"order_id": pa.array(["a"]), "version": pa.array([1], pa.int64()),
            "day": pa.array([dt.date(2025, 1, 1)]), "cents": pa.array([5], pa.int64()),
            "deleted": pa.array([False])}
    pq.write_table(pa.table({**base, **columns}), path)
    return path


# --- 5: source and partition names ------------------------------------------------------------


@pytest.mark.parametrize("source", ["", " ", "a b", "../orders", "orders/p0", ".hidden"])
def test_a_malformed_source_is_refused_not_replaced_by_the_default(ws: Workspace, cli, tmp_path, source):
    events = write_jsonl(tmp_path / "b.jsonl", [GOOD])
    before = published_pointers(ws)
    refused(publish(cli, events, {"p0": 1}, "--source", source), "source")
    assert published_pointers(ws) == before


@pytest.mark.parametrize("name", ["", "p 0", "p0/x", ".."])
def test_a_malformed_partition_name_in_a_vector_is_refused(ws: Workspace, cli, tmp_path, name):
    events = write_jsonl(tmp_path / "b.jsonl", [GOOD])
    refused(publish(cli, events, {name: 1}), "partition")
    assert published_pointers(ws) == (None, None)


def test_a_malformed_landing_partition_folder_is_refused(ws: Workspace, cli):
    folder = ws.config.landing_dir("orders") / "p 0"
    folder.mkdir(parents=True)
    write_jsonl(folder / "00000.jsonl", [GOOD])
    refused(cli("run", "orders_daily"), "p 0", "partition")
    assert published_pointers(ws) == (None, None)


def test_a_malformed_source_in_the_dataset_yaml_is_refused(ws_path: Path, cli):
    path = ws_path / "catalog/datasets/orders_daily.yaml"
    path.write_text(path.read_text().replace("source: orders ", "source: 'or ders' "))
    refused(cli("status"), "orders_daily.yaml", "source")


# --- 7: internal errors that are bad input ------------------------------------------------------


@pytest.mark.parametrize("field, value", [("order_id", None), ("day", "9999-12-31"), ("day", "0000-01-01"),
                                          ("version", None), ("deleted", None)])
def test_jsonl_bad_values_name_file_line_and_field(ws: Workspace, cli, tmp_path, field, value):
    events = write_jsonl(tmp_path / "b.jsonl", [GOOD, {**GOOD, "order_id": "b", field: value}])
    refused(publish(cli, events, {"p0": 2}), "b.jsonl:2", f"'{field}'")
    assert published_pointers(ws) == (None, None)


@pytest.mark.parametrize("field, column", [
    ("order_id", pa.array(["a", None], pa.string())),
    ("day", pa.array([dt.date(2025, 1, 1), dt.date(9999, 12, 31)])),
    ("day", pa.array([0, -719529], pa.date32())),  # 1970-01-01, 0000-01-01
    ("order_id", pa.array([b"a", b"b\xff"], pa.binary())),
])
def test_parquet_bad_values_name_file_row_and_field(ws: Workspace, cli, tmp_path, field, column):
    two = {"order_id": pa.array(["a", "b"]), "version": pa.array([1, 1]),
           "day": pa.array([dt.date(2025, 1, 1)] * 2), "cents": pa.array([5, 6]), "deleted": pa.array([False] * 2)}
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({**two, field: column}), path)
    refused(publish(cli, path, {"p0": 2}), "b.parquet row 2", f"'{field}'")
    assert published_pointers(ws) == (None, None)


def test_invalid_utf8_in_a_jsonl_id_names_the_line(ws: Workspace, cli, tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"order_id": "b\xff", "version": 1, "day": "2025-01-01", '
                     b'"cents": 1, "deleted": false}\n')
    refused(publish(cli, path, {"p0": 2}), "b.jsonl:2", "'order_id'", "UTF-8")
    assert published_pointers(ws) == (None, None)


def test_compact_with_nothing_published_is_a_clear_refusal(ws: Workspace, cli):
    refused(cli("compact", "orders_daily"), "orders_daily", "nothing")
    assert published_pointers(ws) == (None, None)


def _stdin_cli(ws_path: Path, args: list[str], data: bytes):
    res = CliRunner().invoke(main, ["-w", str(ws_path), *args], input=data, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_events_dash_reads_standard_input(ws: Workspace, ws_path: Path):
    data = b"".join(json.dumps(e).encode() + b"\n" for e in [A1, A2])
    code, out, err = _stdin_cli(ws_path, ["publish", "orders_daily", "--events", "-", "--start", "{}",
                                          "--end", '{"p0": 2}'], data)
    assert code == 0, err
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    bad = json.dumps({**A1, "order_id": "z", "cents": -1}).encode() + b"\n"
    code, out, err = _stdin_cli(ws_path, ["publish", "orders_daily", "--events", "-", "--start", '{"p0": 2}',
                                          "--end", '{"p0": 3}'], bad)
    assert code == 2 and "<stdin>:1" in err and "'cents'" in err


def test_events_dash_reads_parquet_from_standard_input(ws: Workspace, ws_path: Path, tmp_path):
    data = parquet(tmp_path / "b.parquet").read_bytes()
    code, out, err = _stdin_cli(ws_path, ["publish", "orders_daily", "--events", "-", "--start", "{}",
                                          "--end", '{"p0": 1}'], data)
    assert code == 0, err
    assert summary_rows(ws) == [("2025-01-01", 5, 1)]


def test_events_dev_stdin_works_from_a_pipe(ws: Workspace, ws_path: Path):
    data = "".join(json.dumps(e) + "\n" for e in [A1, A2, B2, B1])
    proc = subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "publish", "orders_daily",
                           "--events", "/dev/stdin", "--start", "{}", "--end", '{"p0": 4}'],
                          input=data, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]


@pytest.mark.parametrize("key, value", [("landing", ["a", "b"]), ("catalog_dir", 5), ("namespace", {"a": 1}),
                                        ("landing", None), ("commit", "sometimes")])
def test_wrong_types_in_lakepub_yaml_name_file_and_key(ws_path: Path, cli, key, value):
    path = ws_path / "lakepub.yaml"
    config = yaml.safe_load(path.read_text())
    config[key] = value
    path.write_text(yaml.safe_dump(config))
    refused(cli("status"), "lakepub.yaml", key)


def test_a_list_for_constraints_in_a_contract_is_refused(ws_path: Path, cli):
    path = ws_path / "catalog/contracts/orders@v1.0.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["constraints"] = ["order_id", "version"]
    path.write_text(yaml.safe_dump(raw))
    refused(cli("status"), "orders@v1.0.yaml", "constraints")


# --- 8: Parquet coercions ----------------------------------------------------------------------


@pytest.mark.parametrize("field, column, found", [
    ("deleted", pa.array([2], pa.int64()), "int64"),
    ("day", pa.array([dt.datetime(2025, 1, 1, 13, 5)], pa.timestamp("us")), "timestamp"),
    ("version", pa.array([True]), "bool"),
    ("version", pa.array(["7"]), "string"),
    ("cents", pa.array(["100"]), "string"),
    ("order_id", pa.array([12], pa.int64()), "int64"),
    ("cents", pa.array([1.0]), "double"),
    ("day", pa.array(["2025-1-1"]), "YYYY-MM-DD"),
])
def test_parquet_lossy_casts_are_refused(ws: Workspace, cli, tmp_path, field, column, found):
    path = parquet(tmp_path / "b.parquet", **{field: column})
    refused(publish(cli, path, {"p0": 1}), "b.parquet row 1", f"'{field}'", found)
    assert published_pointers(ws) == (None, None)


def test_parquet_lossless_casts_are_accepted(ws: Workspace, cli, tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({
        "order_id": pa.array(["a", "b", "c"], pa.large_string()),
        "version": pa.array([1, 2, 3], pa.int32()),
        "day": pa.array([dt.date(2025, 1, 1), dt.date(2025, 1, 2), None], pa.date64()),
        "cents": pa.array([5, 6, None], pa.int16()),
        "deleted": pa.array([False, False, True]),
    }), path)
    assert publish(cli, path, {"p0": 3}).code == 0
    path2 = tmp_path / "c.parquet"
    pq.write_table(pa.table({
        "order_id": pa.array([b"d"], pa.binary()), "version": pa.array([1], pa.int8()),
        "day": pa.array(["2025-01-03"]), "cents": pa.array([7], pa.uint32()), "deleted": pa.array([False]),
    }), path2)
    res = cli("publish", "orders_daily", "--events", str(path2), "--start", '{"p0": 3}', "--end", '{"p0": 4}')
    assert res.code == 0, res.err
    assert summary_rows(ws) == [("2025-01-01", 5, 1), ("2025-01-02", 6, 1), ("2025-01-03", 7, 1)]


# --- 9: unknown keys, empty batch files -------------------------------------------------------


def test_unknown_key_in_lakepub_yaml_is_refused(ws_path: Path, cli):
    path = ws_path / "lakepub.yaml"
    path.write_text(path.read_text() + "comit: atomic\n")
    refused(cli("status"), "lakepub.yaml", "comit")


@pytest.mark.parametrize("rel, text, key", [
    ("catalog/datasets/orders_daily.yaml", "partiton: day\n", "partiton"),
    ("catalog/contracts/orders@v1.0.yaml", "owner: me\n", "owner"),
])
def test_unknown_key_in_the_catalog_yaml_is_refused(ws_path: Path, cli, rel, text, key):
    path = ws_path / rel
    path.write_text(path.read_text() + text)
    refused(cli("status"), Path(rel).name, key)


def test_unknown_constraint_is_refused_with_its_key_path(ws_path: Path, cli):
    path = ws_path / "catalog/contracts/orders@v1.0.yaml"
    path.write_text(path.read_text().replace("primary_key:", "primary_kye:"))
    refused(cli("status"), "orders@v1.0.yaml", "constraints.primary_kye")


def test_catalog_stays_a_free_mapping_with_env_expansion(ws_path: Path, cli, monkeypatch):
    monkeypatch.setenv("LAKEPUB_TEST_WH", ".lakepub/elsewhere")
    path = ws_path / "lakepub.yaml"
    config = yaml.safe_load(path.read_text())
    config["catalog"].update({"warehouse": "${LAKEPUB_TEST_WH}", "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"})
    path.write_text(yaml.safe_dump(config))
    assert cli("status").code == 0
    ws = Workspace.open(ws_path)
    assert ws.config.catalog["warehouse"] == f"file://{(ws_path / '.lakepub/elsewhere').resolve()}"
    assert ws.config.catalog["py-io-impl"] == "pyiceberg.io.pyarrow.PyArrowFileIO"


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_an_empty_batch_file_says_it_has_0_events(ws: Workspace, cli, tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    refused(publish(cli, path, {"p0": 3}), "empty.jsonl", "0 events", "covers 3")
    assert published_pointers(ws) == (None, None)


# --- 10: a landing segment still being written --------------------------------------------------


def test_an_incomplete_last_line_is_read_once_complete(ws: Workspace, cli):
    events = [GOOD, {**GOOD, "order_id": "b", "cents": 7}, {**GOOD, "order_id": "c", "day": "2025-01-02"},
              {**GOOD, "order_id": "a", "version": 2, "day": "2025-01-03", "cents": 9}]
    folder = ws.config.landing_dir("orders") / "p0"
    folder.mkdir(parents=True)
    segment = folder / "00000.jsonl"
    last = json.dumps(events[3])
    segment.write_text("".join(json.dumps(e) + "\n" for e in events[:3]) + last[:20])
    res = cli("run", "orders_daily", "--format", "json")
    assert res.code == 0, res.err
    assert res.json()["events"] == 3 and res.json()["end"] == {"p0": 3}
    assert dict((d, (c, o)) for d, c, o in summary_rows(ws)) == {
        str(d): v for d, v in oracle_summary(events[:3]).items()}
    with open(segment, "a") as fh:
        fh.write(last[20:] + "\n")
    res = cli("run", "orders_daily", "--format", "json")
    assert res.code == 0, res.err
    assert res.json()["events"] == 1 and res.json()["end"] == {"p0": 4}
    assert dict((d, (c, o)) for d, c, o in summary_rows(ws)) == {
        str(d): v for d, v in oracle_summary(events).items()}
    assert cli("run", "orders_daily", "--format", "json").json()["events"] == 0


def test_a_finished_segment_without_a_final_newline_counts_its_last_line(ws: Workspace, cli):
    """Only the newest segment of a partition can still be growing: once a producer has moved on
    to the next segment, the previous one's unterminated last line is a complete record."""
    folder = ws.config.landing_dir("orders") / "p0"
    folder.mkdir(parents=True)
    (folder / "00000.jsonl").write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "order_id": "b"}))
    write_jsonl(folder / "00001.jsonl", [{**GOOD, "order_id": "c"}])
    res = cli("run", "orders_daily", "--format", "json")
    assert res.code == 0, res.err
    assert res.json()["end"] == {"p0": 3}
    assert summary_rows(ws) == [("2025-01-01", 15, 3)]
