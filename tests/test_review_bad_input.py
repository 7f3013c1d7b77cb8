"""Review of the bad-input rule (h-bad) across the CLI: "exit 2 with one line naming file, line
and field; the published state unchanged; no tracebacks for user errors".

Each input here used to end as an internal error (exit 1), or on two stderr lines, or was
silently taken to mean something else (a YAML key given twice). Every test goes through the CLI
(``cli``: click's CliRunner) and, where a command could write, checks the catalog's metadata
pointers are unchanged (``published_pointers``) and reads the data back with ``lakepub query``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import CliResult, published_pointers, write_jsonl
from lakepub.workspace import Workspace

GOOD = {"order_id": "a", "version": 1, "day": "2025-01-01", "cents": 5, "deleted": False}
CONTRACT = "catalog/contracts/orders@v1.0.yaml"
DATASET = "catalog/datasets/orders_daily.yaml"


def refused(res, *needles: str, code: int = 2) -> str:
    """Exit ``code``, one line on stderr (no traceback, no 'internal error') holding every needle."""
    assert res.code == code, (res.code, res.out, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def published(ws: Workspace, cli) -> list:
    """What a reader sees: orders_daily's rows read back by `lakepub query` (DuckDB)."""
    res = cli("query", "SELECT day::VARCHAR AS day, cents, orders FROM orders_daily ORDER BY day", "--format", "json")
    assert res.code == 0, res.err
    return json.loads(res.out)


@pytest.fixture
def seeded(ws: Workspace, cli, tmp_path: Path) -> Workspace:
    """orders_daily published once (one event), its state remembered as ``ws.before``."""
    res = cli("publish", "orders_daily", "--events", str(write_jsonl(tmp_path / "a.jsonl", [GOOD])),
              "--start", "{}", "--end", '{"p0": 1}')
    assert res.code == 0, res.err
    ws.before = (published_pointers(ws), published(ws, cli))  # type: ignore[attr-defined]
    return ws


def unchanged(ws: Workspace, cli) -> None:
    assert (published_pointers(ws), published(ws, cli)) == ws.before  # type: ignore[attr-defined]


def publish_next(cli, tmp_path: Path):
    events = write_jsonl(tmp_path / "b.jsonl", [{**GOOD, "order_id": "b"}])
    return cli("publish", "orders_daily", "--events", str(events), "--start", '{"p0": 1}', "--end", '{"p0": 2}')


# --- definition files: bytes that are not UTF-8, a folder, a key given twice ----------------------


@pytest.mark.parametrize("rel", ["lakepub.yaml", CONTRACT, DATASET])
def test_a_definition_file_that_is_not_utf8_names_file_and_line(seeded, cli, ws_path, tmp_path, rel):
    path = ws_path / rel
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    line = len(path.read_bytes().splitlines())
    refused(publish_next(cli, tmp_path), Path(rel).name, f"line {line}", "UTF-8")
    path.write_bytes(path.read_bytes().replace(b"\xe9", b""))
    unchanged(seeded, cli)


@pytest.mark.parametrize("rel", [CONTRACT, DATASET])
def test_a_definition_path_that_is_a_folder_is_refused(seeded, cli, ws_path, tmp_path, rel):
    path = ws_path / rel
    saved = path.read_bytes()
    path.unlink()
    path.mkdir()
    refused(publish_next(cli, tmp_path), Path(rel).name, "cannot be read")
    path.rmdir()
    path.write_bytes(saved)
    unchanged(seeded, cli)


@pytest.mark.parametrize("rel, text, key", [
    ("lakepub.yaml", "namespace: elsewhere\n", "namespace"),       # would publish into another namespace
    (DATASET, "partition: day\n", "partition"),                     # would change the partitioning
    (CONTRACT, "constraints: {primary_key: [order_id]}\n", "constraints"),
])
def test_a_key_given_twice_is_refused_not_the_last_one_kept(seeded, cli, ws_path, tmp_path, rel, text, key):
    path = ws_path / rel
    first = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"{key}:"))
    saved = path.read_text()
    path.write_text(saved + text)
    second = len(path.read_text().splitlines())
    refused(publish_next(cli, tmp_path), Path(rel).name, f"'{key}'", f"lines {first} and {second}")
    path.write_text(saved)
    unchanged(seeded, cli)


def test_a_key_given_twice_in_a_nested_mapping_is_refused(ws_path: Path, cli):
    path = ws_path / CONTRACT
    raw = yaml.safe_load(path.read_text())
    assert "cents" in raw["fields"]
    path.write_text(path.read_text().replace("  cents: long", "  cents: long\n  cents: string"))
    refused(cli("status"), "orders@v1.0.yaml", "'cents'", "given twice")


def test_contract_lint_reports_a_file_that_is_not_utf8_as_a_finding(ws_path: Path, cli, tmp_path):
    bad = tmp_path / "bad@v1.0.yaml"
    bad.write_bytes(b"name: bad\n# \xff\n")
    res = cli("contract", "lint", str(bad))
    assert res.code == 1 and "Traceback" not in res.err and "internal error" not in res.err, res.err
    assert f"{bad}:2 SCHEMA.VALID error not UTF-8" in res.out


# --- lakepub query: SQL without a statement ----------------------------------------------------


@pytest.mark.parametrize("sql", ["", "   ", ";", " -- nothing but a comment", "/* and */ ;"])
def test_a_query_without_a_statement_is_invalid_input(seeded, cli, sql):
    for _ in range(2):  # the full path, then the quick path it remembered
        refused(cli("query", sql), "no statement", "SELECT")
    res = cli("query", sql, "--format", "json")
    assert res.code == 2 and json.loads(res.out)["kind"] == "invalid_input", res.out
    unchanged(seeded, cli)


# --- a derived dataset's input expression over a column its input does not have ---------------

MONTHLY = """name: monthly
projection:
  kind: sql
  inputs:
    orders_daily: {expr}
  query: SELECT CAST(date_trunc('month', day) AS DATE) AS month, sum(cents) AS cents FROM orders_daily GROUP BY 1
partition: month(month)
"""


@pytest.mark.parametrize("expr, needle", [("month(nope)", "'nope', which is not a column"),
                                          ("month(cents)", "cannot be applied to 'cents'")])
@pytest.mark.parametrize("command", ["plan", "reconcile"])
def test_an_input_expression_over_a_missing_or_wrong_column_names_the_key(seeded, cli, ws_path, expr, needle,
                                                                          command):
    (ws_path / "catalog/datasets/monthly.yaml").write_text(MONTHLY.format(expr=expr))
    refused(cli(command), "monthly.yaml", "'projection.inputs.orders_daily'", needle)
    assert "monthly" not in cli("tables").out
    unchanged(seeded, cli)


@pytest.mark.parametrize("namespace", ["", " ", "lakepub.", "a..b"])
def test_a_blank_namespace_in_lakepub_yaml_names_the_key(seeded, cli, ws_path, tmp_path, namespace):
    path = ws_path / "lakepub.yaml"
    saved = path.read_text()
    path.write_text(saved.replace("namespace: lakepub", f"namespace: '{namespace}'"))
    refused(cli("status"), "lakepub.yaml", "'namespace'")
    refused(publish_next(cli, tmp_path), "lakepub.yaml", "'namespace'")
    path.write_text(saved)
    unchanged(seeded, cli)


# --- lakepub wait: bad input is refused before "waiting for ..." ------------------------------


@pytest.mark.parametrize("args, needle", [(["nope"], "unknown dataset 'nope'"),
                                          (["orders_daily", "--data-version", "abc"], "--data-version"),
                                          (["orders_daily", "--partition", "2025-10-01"], "--partition")])
def test_wait_refuses_bad_input_on_its_one_line(seeded, cli, args, needle):
    refused(cli("wait", *args, "--timeout", "0s"), needle)


def test_wait_outside_a_workspace_is_one_line(tmp_path: Path):
    from click.testing import CliRunner

    from lakepub.cli import main

    res = CliRunner().invoke(main, ["-w", str(tmp_path), "wait", "orders_daily", "--timeout", "0s"])
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: no lakepub.yaml in {tmp_path} or any parent folder; run 'lakepub init' first"], res.stderr


# --- events: a JSON line nested too deeply ------------------------------------------------------


@pytest.mark.parametrize("nested", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_a_jsonl_line_nested_too_deeply_names_file_and_line(seeded, cli, tmp_path, nested):
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({**GOOD, "order_id": "b"}) + "\n" + nested + "\n")
    res = cli("publish", "orders_daily", "--events", str(path), "--start", '{"p0": 1}', "--end", '{"p0": 3}')
    refused(res, "b.jsonl:2", "nested too deeply")
    unchanged(seeded, cli)


def test_a_landing_line_nested_too_deeply_names_file_and_line(seeded, cli, ws_path):
    folder = ws_path / "landing/orders/p0"
    folder.mkdir(parents=True)
    (folder / "00000.jsonl").write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(cli("run", "orders_daily"), "00000.jsonl:2", "nested too deeply")
    unchanged(seeded, cli)


# --- lakepub retire: a grace no timestamp can end -----------------------------------------------


def test_a_grace_past_the_year_9999_is_refused_and_nothing_retired(seeded, cli):
    from lakepub.errors import UserError

    refused(cli("retire", "orders_daily", "--grace", "99999999999d"), "--grace", "at most 14880w")
    with pytest.raises(UserError, match="year 9999"):  # the Python API takes seconds: checked there too
        Workspace.open(seeded.config.root).retire("orders_daily", grace=1e12)
    res = cli("state", "orders_daily", "--format", "json")
    assert res.code == 0 and res.json()["readiness"] == "published", (res.err, res.out)
    unchanged(seeded, cli)
    assert cli("retire", "orders_daily", "--grace", "520w").code == 0  # ten years is fine


# --- lakepub run: a landing partition holding fewer records than the committed position ---------


@pytest.mark.parametrize("content", [b"", json.dumps(GOOD).encode()[:10]])  # empty; one unfinished line
def test_a_landing_partition_behind_the_committed_position_names_its_folder(seeded, cli, ws_path, content):
    folder = ws_path / "landing/orders/p0"
    folder.mkdir(parents=True)
    (folder / "00000.jsonl").write_bytes(content)
    refused(cli("run", "orders_daily"), f"{folder}:", "p0=1", "beyond its 0 record(s)")
    unchanged(seeded, cli)


# --- lakepub compact: --fold-threshold nan ----------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "NaN"])
def test_a_nan_fold_threshold_is_refused_before_the_ledger_is_compacted(seeded, cli, value):
    refused(cli("compact", "orders_daily", "--fold-threshold", value), "--fold-threshold", "nothing was compacted")
    unchanged(seeded, cli)


# --- lakepub.yaml: ${VAR} not set --------------------------------------------------------------


def test_an_unset_variable_in_the_catalog_is_refused_not_used_as_text(seeded, cli, ws_path, tmp_path, monkeypatch):
    monkeypatch.delenv("LAKEPUB_TEST_UNSET", raising=False)
    path = ws_path / "lakepub.yaml"
    saved = path.read_text()
    path.write_text(saved.replace("warehouse: .lakepub/warehouse", "warehouse: ${LAKEPUB_TEST_UNSET}/warehouse"))
    refused(publish_next(cli, tmp_path), "lakepub.yaml", "'catalog.warehouse'", "LAKEPUB_TEST_UNSET", "not set")
    refused(cli("catalog-config"), "'catalog.warehouse'", "LAKEPUB_TEST_UNSET")
    assert not (ws_path / "${LAKEPUB_TEST_UNSET}").exists()
    monkeypatch.setenv("LAKEPUB_TEST_UNSET", ".lakepub")  # set: expanded as before
    assert cli("catalog-config", "--format", "json").code == 0
    path.write_text(saved)
    unchanged(seeded, cli)


# --- lakepub query: two columns of one name (SELECT * over a self-join) ---------------------------

JOIN = "SELECT * FROM orders_daily a JOIN orders_daily b ON a.day = b.day"


def test_two_columns_of_one_name_are_both_shown_as_table_and_csv(seeded, cli):
    for _ in range(2):  # the full path, then the quick path
        res = cli("query", JOIN, "--format", "csv")
        assert res.code == 0, res.err
        assert res.out.splitlines() == ["day,cents,orders,day,cents,orders", "2025-01-01,5,1,2025-01-01,5,1"]
        res = cli("query", "SELECT 1 AS a, 2 AS a")
        assert res.code == 0 and res.out.splitlines()[2].split() == ["1", "2"], (res.out, res.err)


def test_two_columns_of_one_name_as_json_are_invalid_input_not_a_dropped_column(seeded, cli):
    for _ in range(2):
        res = cli("query", JOIN, "--format", "json")
        refused(res, "two columns one name ('day')", "AS name")
        assert json.loads(res.out)["kind"] == "invalid_input"


# --- lakepub init below a file ------------------------------------------------------------------


def test_init_below_a_file_is_invalid_input(tmp_path: Path):
    from click.testing import CliRunner

    from lakepub.cli import main

    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(main, ["init", str(tmp_path / "afile" / "ws")])
    refused(CliResult(res.exit_code, res.stdout, res.stderr), "afile", "not a file")
    assert (tmp_path / "afile").read_text() == "x"


# --- lakepub contract promote: the option a bad date came from -------------------------------------


@pytest.mark.parametrize("option", ["--since", "--at"])
def test_a_bad_promote_date_names_its_own_option(ws_path: Path, cli, option):
    contract = ws_path / CONTRACT
    saved = contract.read_text()
    res = cli("contract", "promote", "contracts/orders@v1.0", "--to", "VALIDATED", option, "yesterday", "--dry-run")
    line = refused(res, f"{option}: 'yesterday' is not a date")
    assert ({"--since", "--at"} - {option}).pop() not in line
    assert contract.read_text() == saved


# --- events: a valid line longer than Arrow's 1 MiB block -------------------------------------------


def test_an_event_line_longer_than_a_mib_is_published_not_refused_vaguely(seeded, cli, tmp_path):
    long_id = {**GOOD, "order_id": "x" * ((1 << 20) + 100), "day": "2025-01-02", "cents": 7}
    path = write_jsonl(tmp_path / "long.jsonl", [{**GOOD, "order_id": "b"}, long_id])
    res = cli("publish", "orders_daily", "--events", str(path), "--start", '{"p0": 1}', "--end", '{"p0": 3}')
    assert res.code == 0, res.err
    assert published(seeded, cli) == [{"day": "2025-01-01", "cents": 10, "orders": 2},
                                      {"day": "2025-01-02", "cents": 7, "orders": 1}]


# --- durations too long to sleep, wait or stamp -------------------------------------------------


@pytest.mark.parametrize("args, option", [
    (["wait", "orders_daily", "--partition", "2099-01", "--timeout", "1s", "--interval", "99999999999w"], "--interval"),
    (["wait", "orders_daily", "--timeout", "99999999999w"], "--timeout"),
    (["run", "orders_daily", "--follow", "--interval", "99999999999w"], "--interval"),
    (["janitor", "--older-than", "99999999999d"], "--older-than"),
])
def test_a_duration_too_long_to_sleep_on_is_invalid_input(seeded, cli, args, option):
    refused(cli(*args), f"for {option}", "at most 14880w")
    unchanged(seeded, cli)


# --- integers past Python's 4300-digit limit ------------------------------------------------------

HUGE = "9" * 5000


def test_a_jsonl_integer_of_5000_digits_names_file_and_line(seeded, cli, tmp_path):
    path = tmp_path / "b.jsonl"
    huge = json.dumps(GOOD).replace('"cents": 5', f'"cents": {HUGE}')
    path.write_text(json.dumps({**GOOD, "order_id": "b"}) + "\n" + huge + "\n")
    res = cli("publish", "orders_daily", "--events", str(path), "--start", '{"p0": 1}', "--end", '{"p0": 3}')
    refused(res, "b.jsonl:2", "more than 4300 digits")
    unchanged(seeded, cli)


@pytest.mark.parametrize("option", ["--start", "--end"])
def test_a_vector_offset_of_5000_digits_is_invalid_input(seeded, cli, tmp_path, option):
    vectors = {"--start": '{"p0": 1}', "--end": '{"p0": 2}', option: f'{{"p0": {HUGE}}}'}
    events = write_jsonl(tmp_path / "b.jsonl", [{**GOOD, "order_id": "b"}])
    res = cli("publish", "orders_daily", "--events", str(events), "--start", vectors["--start"],
              "--end", vectors["--end"])
    assert len(refused(res, f"{option[2:]} vector", "more than 4300 digits")) < 200
    unchanged(seeded, cli)


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_as_of_whose_utc_instant_leaves_years_1_to_9999_is_invalid_input(seeded, cli, instant):
    for _ in range(2):  # the quick path declines, the full path says it
        refused(cli("status", "--as-of", instant), "--as-of", "year 1 to 9999")


def test_a_diff_snapshot_of_5000_digits_is_invalid_input(seeded, cli):
    refused(cli("diff", "orders_daily", HUGE, "current"), "SNAPSHOT_A", "neither a snapshot id")


# --- output paths where a file stands for a folder, or a folder for a file ------------------------------


@pytest.mark.parametrize("args, needle", [
    (["report", "--out", "{file}/r.html"], "is a file, not a folder"),
    (["contract", "export", "contracts/orders@v1.0", "--out", "{file}/x"], "Not a directory"),
    (["metrics", "--textfile", "{dir}"], "lakepub.prom: Is a directory"),
])
def test_an_output_path_that_cannot_be_one_is_invalid_input(seeded, cli, tmp_path, args, needle):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "tf" / "lakepub.prom").mkdir(parents=True)
    args = [a.format(file=tmp_path / "afile", dir=tmp_path / "tf") for a in args]
    refused(cli(*args), needle)
    assert (tmp_path / "afile").read_text() == "x"
    assert list((tmp_path / "tf").iterdir()) == [tmp_path / "tf/lakepub.prom"]  # no temp file left
    unchanged(seeded, cli)


def test_status_with_nothing_to_show_says_why(ws_path: Path, cli, tmp_path: Path):
    """A catalog_dir spelt wrong used to look like a workspace with nothing published (no output,
    exit 0); every dataset retired likewise. Still exit 0 (a read, nothing is wrong with the data),
    with one stderr line saying why; JSON stays an empty list."""
    config = ws_path / "lakepub.yaml"
    config.write_text(config.read_text().replace("catalog_dir: catalog", "catalog_dir: catalgo"))
    assert "catalog_dir: catalgo" in config.read_text()
    res = cli("status")
    assert (res.code, res.out) == (0, ""), res.err
    assert res.err.strip().splitlines() == [
        f"no dataset to show: {ws_path / 'catalgo' / 'datasets'} defines none (lakepub.yaml's catalog_dir names "
        "the catalog folder)"]
    res = cli("status", "--format", "json")
    assert (res.code, json.loads(res.out), res.err) == (0, [], "")
    config.write_text(config.read_text().replace("catalog_dir: catalgo", "catalog_dir: catalog"))
    events = write_jsonl(tmp_path / "a.jsonl", [GOOD])
    assert cli("publish", "orders_daily", "--events", str(events), "--start", "{}", "--end", '{"p0": 1}').code == 0
    assert cli("retire", "orders_daily").code == 0
    res = cli("status")
    assert res.code == 0 and res.out == "" and "every dataset of" in res.err and "orders_daily" in res.err, res.err


@pytest.mark.parametrize("args, needle", [
    (["status", "--format", "xml"], "'--format': 'xml' is not one of"),
    (["stauts"], "No such command 'stauts'"),
    (["status", "--bogus"], "No such option '--bogus'"),
    (["contract", "lint", "--nope"], "No such option '--nope'"),
    (["publish"], "Missing argument 'DATASET'"),
    (["status", "--format", "json", "--bogus"], "No such option '--bogus'"),
    (["log", "--format=json"], "Missing argument 'DATASET'"),
])
def test_click_usage_errors_are_one_line_and_json_when_asked(cli, args, needle):
    """Click's usage errors printed four lines (usage, hint, blank, error) and no JSON document;
    now one ``error:`` line naming the command and where its help is, exit 2, and with
    ``--format json`` one JSON object on stdout too."""
    res = cli(*args)
    line = refused(res, needle, "--help'")
    assert line.startswith("error: main"), line  # the command path (CliRunner names the group main)
    if "json" in " ".join(args):
        assert json.loads(res.out) == {"code": 2, "kind": "invalid_input", "type": "UsageError",
                                       "message": line.removeprefix("error: ")}
    else:
        assert res.out == ""


def test_help_version_and_bare_group_keep_clicks_behaviour(cli):
    assert cli("--help").code == 0 and "Exit codes" in cli("--help").out
    res = cli("status", "--help")
    assert res.code == 0 and res.out.startswith("Usage: ")
    res = cli("--version")
    assert res.code == 0 and "version" in res.out
    refused(cli(), "Missing command", "--help'")  # options but no command
    from click.testing import CliRunner

    from lakepub.cli import main

    bare = CliRunner().invoke(main, [])
    assert bare.exit_code == 2 and "Commands:" in bare.stderr  # nothing at all: click's help (8.2+: exit 2)


def test_a_usage_error_with_json_asked_on_a_closed_pipe_is_still_one_line(tmp_path: Path):
    """``lakepub status --format json --bogus | head -0``: OneLineUsage printed the JSON object
    outside click's main, so a closed stdout (EPIPE) was a BrokenPipeError traceback, exit 1, and
    the error line never reached stderr. Now the line and exit 2, as without the pipe."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(tmp_path), "status", "--format", "json",
                             "--bogus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    proc.stdout.close()  # the reader is gone before the CLI writes
    err = proc.stderr.read().decode()
    assert proc.wait() == 2 and err.count("\n") == 1 and err.startswith("error: ") and "'--bogus'" in err, err


@pytest.mark.parametrize("args, json_out", [
    (["status", "--format", "json", "--format", "table", "--bogus"], False),  # click: the last one wins
    (["status", "--format", "table", "--format=json", "--bogus"], True),
    (["query", "--bogus", "--", "--format", "json"], False),  # after '--': arguments, not options
])
def test_a_usage_error_asks_json_as_click_would_read_format(cli, args, json_out):
    """``_asks_json`` said yes to any ``--format json`` on the line: a later ``--format table``
    (the one click uses) or words after ``--`` still printed a JSON object on stdout."""
    res = cli(*args)
    refused(res, "No such option '--bogus'", "--help'")
    assert (res.out != "") is json_out, res.out


def test_status_with_nothing_to_show_follows_quiet_and_log_format(ws_path: Path, cli):
    """The 'no dataset to show' line was a bare echo on stderr: printed under ``-q`` (only errors
    on stderr) and as plain text under ``--log-format json`` (every stderr line a JSON object).
    It is a warning record now: silent with -q, one JSON object with json logs."""
    config = ws_path / "lakepub.yaml"
    config.write_text(config.read_text().replace("catalog_dir: catalog", "catalog_dir: catalgo"))
    res = cli("-q", "status")
    assert (res.code, res.out, res.err) == (0, "", ""), res.err
    res = cli("--log-format", "json", "status")
    records = [json.loads(line) for line in res.err.strip().splitlines()]
    assert res.code == 0 and any("no dataset to show" in r["message"] and r["level"] == "warning"
                                 for r in records), res.err
