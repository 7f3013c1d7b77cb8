"""Logs (--log-format, -v/-q), JSON errors with --format json, and `run`'s per-batch lines.

Every test drives the CLI against a real workspace and checks what it says against the
published tables (`lakepub log`, the snapshot ids in the catalog).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from conftest import A1, A2, B1, B2, SEED_EVENTS, CliResult, published_pointers, write_jsonl
from lakepub.cli import main

BAD_DAY = {"order_id": "C", "version": 1, "day": "2025-13-01", "cents": 5, "deleted": False}


def _cli(ws_path: Path, *args: str, env: dict[str, str] | None = None) -> CliResult:
    result = CliRunner().invoke(main, ["-w", str(ws_path), *args], catch_exceptions=False, env=env)
    return CliResult(result.exit_code, result.stdout, result.stderr)


def _records(err: str) -> list[dict]:
    """Every stderr line parsed as one JSON object (fails on any line that is not)."""
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def _land(ws_path: Path, segments: list[list[dict]]) -> None:
    folder = ws_path / "landing" / "orders" / "p0"
    folder.mkdir(parents=True, exist_ok=True)
    for i, events in enumerate(segments):
        write_jsonl(folder / f"{i:05d}.jsonl", events)


def _stream(n_orders: int) -> list[dict]:
    return [{"order_id": f"o{i}", "version": 1, "day": f"2025-10-{1 + i % 28:02d}", "cents": 10 + i,
             "deleted": False} for i in range(n_orders)]


# --- JSON logs --------------------------------------------------------------------------------


def test_json_logs_of_a_publish_carry_dataset_batch_and_snapshot(ws_path: Path, tmp_path: Path):
    events = write_jsonl(tmp_path / "b.jsonl", SEED_EVENTS)
    args = ("--log-format", "json", "publish", "orders_daily", "--events", str(events),
            "--start", '{"p0":0}', "--end", '{"p0":4}', "--format", "json")
    res = _cli(ws_path, *args)
    assert res.code == 0, res.err
    out = res.json()
    records = _records(res.err)
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"]) for r in records)
    by_event = {r.get("event"): r for r in records}
    started, published = by_event["batch_started"], by_event["published"]
    assert started["dataset"] == "orders_daily" and started["batch_id"] == out["batch_id"]
    assert started["source"] == "orders" and started["events"] == 4 and started["end"] == {"p0": 4}
    assert published["snapshot_id"] == out["snapshot_id"] and published["batch_id"] == out["batch_id"]
    assert published["counts"]["events"] == 4 and published["duration_s"] > 0
    assert published["level"] == "info" and published["logger"] == "lakepub.publish"
    # the snapshot the log names is the one the catalog publishes
    log = _cli(ws_path, "log", "orders_daily", "--format", "json").json()
    assert log[0]["snapshot_id"] == published["snapshot_id"]

    again = _cli(ws_path, *args)
    assert again.code == 0
    done = [r for r in _records(again.err) if r.get("event") == "already_published"]
    assert len(done) == 1 and done[0]["snapshot_id"] == out["snapshot_id"]


def test_json_logs_of_a_run_name_every_published_snapshot(ws_path: Path):
    _land(ws_path, [_stream(30), _stream(30)[:10] + [dict(e, version=2, cents=1) for e in _stream(20)]])
    res = _cli(ws_path, "--log-format", "json", "run", "orders_daily", "--max-batch", "20")
    assert res.code == 0, res.err
    records = _records(res.err)
    published = [r for r in records if r.get("event") == "published"]
    log = _cli(ws_path, "log", "orders_daily", "--format", "json").json()
    assert [r["snapshot_id"] for r in reversed(published)] == [e["snapshot_id"] for e in log]
    assert [r["batch_id"] for r in reversed(published)] == [e["batch_id"] for e in log]
    assert {r["dataset"] for r in published} == {"orders_daily"}
    run_started = next(r for r in records if r.get("event") == "run_started")
    run_done = next(r for r in records if r.get("event") == "run_done")
    assert run_started["pending"] == 60 and run_done["events"] == 60 and run_done["batches"] == len(log) == 3
    assert run_done["snapshot_id"] == log[0]["snapshot_id"]


def test_quiet_silences_and_verbose_adds_debug(ws_path: Path, tmp_path: Path):
    events = write_jsonl(tmp_path / "b.jsonl", [A1, A2])
    quiet = _cli(ws_path, "-q", "--log-format", "json", "publish", "orders_daily", "--events", str(events),
                 "--start", '{"p0":0}', "--end", '{"p0":2}')
    assert quiet.code == 0 and quiet.err == ""
    more = write_jsonl(tmp_path / "c.jsonl", [B2, B1])
    verbose = _cli(ws_path, "-v", "--log-format", "json", "publish", "orders_daily", "--events", str(more),
                   "--start", '{"p0":2}', "--end", '{"p0":4}')
    assert verbose.code == 0, verbose.err
    levels = {r["level"] for r in _records(verbose.err)}
    assert {"debug", "info"} <= levels
    projected = next(r for r in _records(verbose.err) if r.get("event") == "projected")
    assert projected["new_ledger_rows"] == 2 and projected["attempt"] == 1


def test_default_text_logs_leave_stderr_empty_and_env_sets_the_level(ws_path: Path, tmp_path: Path):
    events = write_jsonl(tmp_path / "b.jsonl", SEED_EVENTS)
    args = ("publish", "orders_daily", "--events", str(events), "--start", '{"p0":0}', "--end", '{"p0":4}')
    res = _cli(ws_path, *args)
    assert res.code == 0 and res.err == "" and res.out.startswith("published orders_daily snapshot ")
    again = _cli(ws_path, *args, env={"LAKEPUB_LOG_LEVEL": "info", "LAKEPUB_LOG_FORMAT": "json"})
    assert [r["event"] for r in _records(again.err)] == ["batch_started", "already_published"]
    text = _cli(ws_path, "-v", *args)
    assert text.err.splitlines() == [line for line in text.err.splitlines() if line.startswith("info: ")]
    assert "info: already published: batch " in text.err
    bad = _cli(ws_path, "status", env={"LAKEPUB_LOG_LEVEL": "loud"})
    assert bad.code == 2 and bad.err.startswith("error: LAKEPUB_LOG_LEVEL='loud'") and bad.err.count("\n") == 1


def test_a_lost_commit_race_is_logged_as_a_retry(ws_path: Path, tmp_path: Path, monkeypatch):
    from lakepub.publish import publisher as publisher_module
    from lakepub.store.commit import CommitConflict

    real = publisher_module.commit_atomically
    calls = {"n": 0}

    def lose_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise CommitConflict("a concurrent writer moved the pointer")
        return real(*args, **kwargs)

    monkeypatch.setattr(publisher_module, "commit_atomically", lose_once)
    events = write_jsonl(tmp_path / "b.jsonl", SEED_EVENTS)
    res = _cli(ws_path, "--log-format", "json", "publish", "orders_daily", "--events", str(events),
               "--start", '{"p0":0}', "--end", '{"p0":4}', "--format", "json")
    assert res.code == 0, res.err
    records = _records(res.err)
    retry = [r for r in records if r.get("event") == "commit_retry"]
    assert len(retry) == 1 and retry[0]["attempt"] == 1 and retry[0]["batch_id"] == res.json()["batch_id"]
    assert next(r for r in records if r.get("event") == "published")["attempts"] == 2


# --- JSON errors ------------------------------------------------------------------------------


def test_invalid_event_is_a_json_error_naming_file_line_and_field(ws_path: Path, tmp_path: Path):
    events = write_jsonl(tmp_path / "bad.jsonl", [A1, BAD_DAY])
    res = _cli(ws_path, "publish", "orders_daily", "--events", str(events), "--start", '{"p0":0}',
               "--end", '{"p0":2}', "--format", "json")
    assert res.code == 2
    doc = json.loads(res.out)  # exactly one JSON document on stdout
    assert doc["code"] == 2 and doc["kind"] == "invalid_input" and doc["type"] == "InvalidEvent"
    assert doc["file"] == str(events) and doc["line"] == 2 and doc["field"] == "day"
    assert "2025-13-01" in doc["message"]
    assert res.err.startswith("error: invalid event at ") and res.err.count("\n") == 1  # stderr: the one line
    # with JSON logs the stderr line is a JSON record too
    logged = _cli(ws_path, "--log-format", "json", "publish", "orders_daily", "--events", str(events),
                  "--start", '{"p0":0}', "--end", '{"p0":2}', "--format", "json")
    (record,) = [r for r in _records(logged.err) if r["level"] == "error"]
    assert record["code"] == 2 and record["field"] == "day" and record["line"] == 2 and record["logger"] == "lakepub.cli"


def test_conflict_and_stale_start_are_json_errors_with_exit_3(ws_path: Path, tmp_path: Path, ws):
    first = write_jsonl(tmp_path / "a.jsonl", [A1])
    assert _cli(ws_path, "publish", "orders_daily", "--events", str(first), "--start", '{"p0":0}',
                "--end", '{"p0":1}').code == 0
    before = published_pointers(ws)
    clash = write_jsonl(tmp_path / "clash.jsonl", [dict(A1, cents=999)])
    res = _cli(ws_path, "publish", "orders_daily", "--events", str(clash), "--start", '{"p0":1}',
               "--end", '{"p0":2}', "--format", "json")
    assert res.code == 3
    doc = json.loads(res.out)
    assert (doc["code"], doc["kind"], doc["type"]) == (3, "refused", "PayloadConflict")
    assert doc["key"] == "A" and doc["version"] == 1 and "nothing was published" in doc["message"]
    stale = _cli(ws_path, "publish", "orders_daily", "--events", str(clash), "--start", '{"p0":0}',
                 "--end", '{"p0":1}', "--format", "json")
    doc = json.loads(stale.out)
    assert stale.code == 3 and doc["type"] == "StaleStart"
    assert doc["source"] == "orders" and doc["start"] == {} and doc["committed"] == {"p0": 1}  # zeros dropped
    assert published_pointers(ws) == before


def test_unknown_dataset_and_config_errors_are_json(ws_path: Path):
    res = _cli(ws_path, "status", "nope", "--format", "json")
    doc = json.loads(res.out)
    assert res.code == 2 and doc["type"] == "UnknownDataset" and doc["dataset"] == "nope"
    assert doc["kind"] == "invalid_input" and "unknown dataset 'nope'" in doc["message"]
    config = ws_path / "lakepub.yaml"
    config.write_text(config.read_text() + "comit: atomic\n")
    res = _cli(ws_path, "log", "orders_daily", "--format", "json")
    doc = json.loads(res.out)
    assert res.code == 2 and doc["type"] == "ConfigError" and doc["key"] == "comit"
    assert Path(doc["file"]) == config.resolve() or Path(doc["file"]).name == "lakepub.yaml"


def test_text_errors_and_commands_without_format_keep_one_stderr_line(ws_path: Path):
    res = _cli(ws_path, "status", "nope")
    assert res.code == 2 and res.out == "" and res.err.startswith("error: unknown dataset 'nope'")
    again = _cli(ws_path, "init", str(ws_path))  # `init` has no --format: a plain error line
    assert again.code == 2 and again.out == "" and again.err.count("\n") == 1 and "already exists" in again.err


def test_internal_and_interrupted_errors_have_their_kinds():
    from lakepub.cli_support import error_document

    doc = error_document(ZeroDivisionError("division by zero"))
    assert doc == {"code": 1, "kind": "internal", "type": "ZeroDivisionError",
                   "message": "internal error: ZeroDivisionError: division by zero"}
    assert error_document(KeyboardInterrupt())["code"] == 130


# --- run's per-batch lines --------------------------------------------------------------------


def test_piped_run_prints_one_line_per_batch_matching_the_log(ws_path: Path, cli_process):
    _land(ws_path, [_stream(25), [dict(e, version=2, cents=e["cents"] + 1) for e in _stream(25)[:15]] + _stream(5)])
    res = cli_process("run", "orders_daily", "--max-batch", "20")  # a subprocess: stdout is a pipe
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    pattern = re.compile(r"snapshot (\d+) batch ([0-9a-f]{12}): (\d+) events, (\d+) entities changed, "
                         r"(\d+) duplicates, end (\{.*\}), (\d+\.\d\d) s")
    batches = [m.groups() for line in lines if (m := pattern.fullmatch(line))]
    assert len(batches) == 3 and lines[-1].startswith("published 3 batch(es), 45 events")
    assert len(lines) == 4
    log = json.loads(cli_process("log", "orders_daily", "--format", "json").out)
    assert [(int(b[0]), b[1]) for b in reversed(batches)] == [(e["snapshot_id"], e["batch_id"][:12]) for e in log]
    assert [int(b[2]) for b in batches] == [20, 20, 5]
    assert sum(int(b[4]) for b in batches) == 5  # the re-sent version-1 events of the second segment
    assert json.loads(batches[-1][5]) == {"p0": 45}
    assert res.err == ""  # no progress bar when not on a terminal

    more = cli_process("run", "orders_daily", "--format", "json")
    assert more.code == 0 and json.loads(more.out)["batches"] == []  # --format json: one document


def test_run_on_a_terminal_keeps_the_progress_bar(ws_path: Path):
    import os
    import pty
    import subprocess
    import sys

    _land(ws_path, [_stream(25)])
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "run", "orders_daily",
                             "--max-batch", "10"], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=120) == 0
    os.close(master)
    text = b"".join(chunks).decode()
    assert "publishing orders_daily" in text and "published 3 batch(es), 25 events" in text
    assert not re.search(r"^snapshot \d+ batch ", text, re.M)  # no per-batch lines on a terminal


def test_a_failed_verify_prints_its_report_as_the_one_json_document(ws, cli):
    import datetime

    import pyarrow as pa

    from lakepub.store.layout import SUMMARY_ARROW

    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    table.overwrite(pa.Table.from_pylist([{"day": datetime.date(2025, 10, 1), "cents": 1, "orders": 1}],
                                         schema=SUMMARY_ARROW))  # a write that bypassed lakepub
    res = cli("verify", "orders_daily", "--format", "json")
    assert res.code == 1
    report = json.loads(res.out)  # one document: the report, not a second error object
    assert report["ok"] is False and report["mismatches"]
    assert res.err.startswith("error: verify orders_daily: ") and res.err.count("\n") == 1
