"""``lakepub report``: one self-contained HTML page about published datasets.

Per dataset: its measures over the partition column (an aggregate's sums per value of its
partition column; a current-state table's rows per partition), a timeline of publishes (events,
duration, lag), quality results (``verify``, refusals, duplicates, stale versions, deletes) and
recent changes (the groups the newest publish changed, from ``diff``, and the publish log).

The invariant: the page needs nothing at view time. Charts are inline SVG drawn here
(``report/svg.py``), styles are inline, there is no script and no external reference, so it can
be mailed, archived or opened offline, and it shows exactly the published snapshots it was
written from (named in the page). It is written atomically (temp file, then rename).

Where figures come from: measures are read from the published snapshot with DuckDB; a publish's
duration is its snapshot's timestamp minus ``lakepub.publish-started-ms`` on it (``store/record.py``;
publishes record it, builds, compactions and older releases do not: "-"); its lag is the age, at its commit, of the landing segment holding the first record it
published (a segment's modification time is when its newest line was written, so this is a lower
bound; "-" when the segments are gone or the batch came from ``lakepub publish`` of another
source).
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from lakepub.errors import UserError
from lakepub.report import svg
from lakepub.store.record import publish_duration_s

MAX_POINTS = 366  # values of the partition column drawn (the newest ones)
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:14px;margin:24px;color:#1d2630;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dee4}
h3{font-size:15px;margin:18px 0 6px}.meta{color:#57606a;font-size:13px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 12px}
th,td{border:1px solid #d8dee4;padding:3px 7px;text-align:left;white-space:nowrap}th{background:#f3f5f7}
td.num{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#1a7f37;font-weight:600}
.bad{color:#cf222e;font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:8px}
svg.chart{background:#fbfcfd;border:1px solid #e4e8ec}svg .bar{fill:#3b78c3}svg .line{stroke:#d9822b;stroke-width:2}
svg .point{fill:#d9822b}svg .grid{stroke:#e6e9ed}svg .axis{stroke:#8c959f}
svg .tick{font-size:10px;fill:#57606a}svg .title{font-size:12px;font-weight:600;fill:#1d2630}
"""


def write_report(ws, datasets: list[str], out: Path, *, limit: int = 30) -> tuple[Path, list[str]]:
    """Write the page for ``datasets`` (default: every published one) to ``out``; returns the
    path and the datasets shown."""
    for name in datasets:
        ws.dataset(name)  # an unknown name is exit 2 before anything is read
    names = datasets or sorted(ws.published_tables())
    sections = [_section(ws, name, limit) for name in names]
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    nav = " · ".join(f'<a href="#{escape(n)}">{escape(n)}</a>' for n in names)
    body = "\n".join(sections) or "<p>No dataset has been published yet.</p>"
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>lakepub report</title><style>{_CSS}</style></head><body>\n"
            f"<h1>lakepub report</h1><p class=\"meta\">workspace {escape(str(ws.config.root))} · written {now} · "
            f"{nav}</p>\n{body}\n</body></html>\n")
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file on the way: the folder cannot be made
        raise UserError(f"--out {out}: {exc.filename} is a file, not a folder; give another path") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(page)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a report is an ordinary file
    os.replace(tmp, out)
    return out, names


def _section(ws, name: str, limit: int) -> str:
    table = ws._summary_table(name)  # noqa: SLF001 - the workspace's own lookup
    head = f'<section id="{escape(name)}" class="dataset"><h2>{escape(name)}</h2>'
    if table is None or table.metadata.current_snapshot_id is None:
        return head + "<p>not published yet</p></section>"
    from lakepub.lineage import sources

    spec = ws.dataset(name)
    status = ws.status(name)
    history = sources.publishes(table)
    parts = [head, f'<p class="meta">{escape(spec.kind.name)} · partition {escape(str(spec.partition))} · '
             f'published snapshot {status.snapshot_id} at {escape(str(status.published_at))} · '
             f'{status.rows} rows in {status.partitions} partition(s)</p>']
    parts.append("<h3>Measures over the partition column</h3>")
    parts.append('<div class="charts">' + "".join(_measure_charts(ws, spec, table)) + "</div>")
    parts.append("<h3>Publishes</h3>")
    parts.append(_timeline(ws, spec, history[:limit]))
    parts.append("<h3>Quality</h3>")
    parts.append(_quality(ws, name, status))
    parts.append("<h3>Recent changes</h3>")
    parts.append(_recent(ws, name, history))
    parts.append("</section>")
    return "\n".join(parts)


def _measure_charts(ws, spec, table) -> list[str]:
    from lakepub import duck
    from lakepub.store.integrity import check_scannable

    kind, partition = spec.kind, spec.kind.partition
    check_scannable(table)
    scan = duck.scan_sql(table.metadata_location)
    q = duck.name
    con = duck.connect(ws.config.catalog)
    try:
        if kind.name == "aggregate":
            measures = [m.name for m in kind.measures]
            column = partition.column if partition.column in kind.group_by else (kind.group_by or [None])[0]
            sums = ", ".join(f"sum({q(m)})" for m in measures)
            if column is None:
                rows = [("all", *con.execute(f"SELECT {sums} FROM {scan}").fetchone())]
            else:
                rows = con.execute(f"SELECT * FROM (SELECT {q(column)}, {sums} FROM {scan} GROUP BY 1 "
                                   f"ORDER BY 1 DESC NULLS FIRST LIMIT {MAX_POINTS}) ORDER BY 1 NULLS LAST").fetchall()
            labels = [_text(r[0]) for r in rows]
            return [svg.bar_chart(f"{m} by {column or 'all rows'}", f"measure-{m}", labels,
                                  [_number(r[i + 1]) for r in rows]) for i, m in enumerate(measures)]
        if partition.column is None:
            n = con.execute(f"SELECT count(*) FROM {scan}").fetchone()[0]
            return [svg.bar_chart("rows", "measure-rows", ["all"], [n])]
        values = con.execute(f"SELECT {q(partition.column)} FROM {scan}").to_arrow_table()
    finally:
        con.close()
    counts: dict[str, int] = {}
    from lakepub.lineage.sources import partition_labels

    for label in partition_labels(partition, values).to_pylist():
        counts[label] = counts.get(label, 0) + 1
    labels = sorted(counts, key=_sort_key)[-MAX_POINTS:]
    return [svg.bar_chart(f"rows per partition ({partition})", "measure-rows", labels, [counts[k] for k in labels])]


def _timeline(ws, spec, history) -> str:
    from lakepub.landing import LandingSource

    oldest_first = list(reversed(history))
    landing = LandingSource(ws.config.landing_dir(spec.source), spec.contract)
    rows, events, durations, lags = [], [], [], []
    for p in oldest_first:
        batch, counts = p.record.batch, p.record.counts
        props = _summary(ws, spec.name, p.snapshot_id)
        duration = publish_duration_s(props, p.timestamp_ms)
        lag = _lag(landing, batch, p.timestamp_ms) if batch.get("source") == spec.source else None
        events.append(counts.events)
        durations.append(duration)
        lags.append(lag)
        rows.append([p.committed_at[:19].replace("T", " "), p.kind, p.batch_id[:12], str(batch.get("source", "")), _vector(batch.get("start")),
                     _vector(batch.get("end")), counts.events, counts.entities_changed, counts.duplicates,
                     counts.deletes, counts.partitions_rewritten,
                     "-" if duration is None else f"{duration:.3f}", "-" if lag is None else f"{lag:.1f}"])
    labels = [p.committed_at[11:19] for p in oldest_first]  # HH:MM:SS (the table has the dates)
    w = 420
    charts = [svg.bar_chart("events per publish", "timeline-events", labels, events, w),
              svg.line_chart("duration (s)", "timeline-duration", labels, durations, w)
              if any(d is not None for d in durations) else
              svg.empty("duration (s)", "timeline-duration", "not recorded on these snapshots", w),
              svg.line_chart("lag at commit (s)", "timeline-lag", labels, lags, w)
              if any(v is not None for v in lags) else svg.empty("lag at commit (s)", "timeline-lag", "no landing data", w)]
    headers = ["committed", "kind", "batch", "source", "start", "end", "events", "changed", "duplicates",
               "deletes", "partitions", "duration s", "lag s"]
    return '<div class="charts">' + "".join(charts) + "</div>" + _table("publishes", headers, list(reversed(rows)))


def _quality(ws, name: str, status) -> str:
    report = ws.verify(name)
    verdict = (f'<span class="ok">ok</span>: {report.partitions_checked} partition checksum(s) match' if report.ok
               else f'<span class="bad">{len(report.mismatches)} mismatch(es)</span>: '
                    + escape("; ".join(report.mismatches[:3])))
    t = status.totals
    rows = [["verify", verdict], ["events", t.events], ["new versions", t.new_versions],
            ["duplicates ignored", t.duplicates], ["stale versions ignored", t.stale], ["superseded", t.superseded],
            ["deletes", t.deletes], ["batches refused: payload conflicts", status.conflicts],
            ["batches refused: stale starts", status.stale_refused]]
    if t.rejected or status.gate_refused or t.inferred_from_schema_default:  # publish gates (contract/gates.py)
        rows += [["events rejected by publish gates", t.rejected], ["batches refused: strict publish gates",
                 status.gate_refused], ["values inferred from a history_only default", t.inferred_from_schema_default]]
    if status.landing is not None:
        rows.append(["landing records not yet published", status.landing.pending])
    if status.note:
        rows.append(["note", escape(status.note)])
    return _table("quality", ["check", "result"], rows, raw={0: False, 1: True})


def _recent(ws, name: str, history) -> str:
    publishes = [p for p in history if p.kind != "compaction"]
    if len(publishes) < 2:
        return "<p>one publish so far: every group is new</p>"
    from lakepub.lineage.diff import diff

    d = diff(ws, name, str(publishes[1].snapshot_id), str(publishes[0].snapshot_id))
    s = d.summary()
    lead = (f"<p>newest publish {escape(publishes[0].batch_id[:12])} ({escape(publishes[0].committed_at)}) vs the one "
            f"before: groups +{s['groups_added']} −{s['groups_removed']} ~{s['groups_changed']} in "
            f"{len(d.partitions)} partition(s) (<code>lakepub diff</code>)</p>")
    rows = []
    for g in d.groups[:25]:
        delta = g.get("delta") or {n: "changed" for n in g.get("changed", [])}
        rows.append([g["partition"], _pairs(g["group"]), g["status"], _pairs(g["a"]), _pairs(g["b"]), _pairs(delta)])
    more = f"<p class=\"meta\">… and {len(d.groups) - 25} more</p>" if len(d.groups) > 25 else ""
    changes = _table("changes", ["partition", "group", "status", "before", "after", "delta"], rows) + more
    return lead + changes + _events(ws, name, publishes[0], d.partitions[0]["partition"] if d.partitions else None)


def _events(ws, name: str, newest, partition: str | None) -> str:
    """The input events of the newest publish that moved its first changed partition (``explain``)."""
    if partition is None:
        return ""
    from lakepub.lineage.explain import explain

    found = [c for c in explain(ws, name, partition).changes if c.publish.snapshot_id == newest.snapshot_id]
    events = found[0].events if found else []
    if not events:
        return ""
    rows = [[_pairs(e.key), e.version, "-" if e.old_version is None else e.old_version,
             "delete" if e.deleted else "", _contribution(e.old), _contribution(e.new)] for e in events[:15]]
    more = f"<p class=\"meta\">… and {len(events) - 15} more</p>" if len(events) > 15 else ""
    return (f"<p>input events of that publish that moved partition {escape(partition)} "
            f"(<code>lakepub explain {escape(name)} --partition {escape(partition)}</code>):</p>"
            + _table("events", ["key", "version", "was", "", "old", "new"], rows) + more)


def _contribution(c) -> str:
    return "(not live)" if c is None else f"[{c.partition}] {_pairs(c.group)} {_pairs(c.measures)}"


def _summary(ws, name: str, snapshot_id: int) -> dict[str, str]:
    table = ws._summary_table(name)  # noqa: SLF001
    snapshot = table.snapshot_by_id(snapshot_id)
    return dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}


def _lag(landing, batch: dict[str, Any], commit_ms: int) -> float | None:
    start = batch.get("start")
    if not isinstance(start, dict) or not landing.exists():
        return None
    try:
        age = landing.backlog(start, now=commit_ms / 1000).oldest_age_s
    except Exception:  # noqa: BLE001 - a landing folder that changed shape: no lag, the report still renders
        return None
    return max(0.0, age) if age is not None else None


def _table(name: str, headers: list[str], rows: list[list[Any]], raw: dict[int, bool] | None = None) -> str:
    raw = raw or {}
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            text = str(v) if raw.get(i) else escape(str(v))
            cells.append(f'<td class="num">{text}</td>' if num else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{name}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _pairs(values: dict[str, Any] | None) -> str:
    return "-" if values is None else " ".join(f"{k}={_text(v)}" for k, v in values.items())


def _vector(value: Any) -> str:
    if not isinstance(value, dict):
        return "-"
    return " ".join(f"{k}:{v}" for k, v in sorted(value.items())) or "0"


def _sort_key(label: str) -> tuple[int, Any]:
    return (0, int(label)) if label.lstrip("-").isdigit() else (1, label)
