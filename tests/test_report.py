"""`lakepub report` through the CLI, rendered in headless Chromium (Debian's `chromium`).

The page is written for a workspace with corrections, duplicates, deletes and a refused batch
(payload conflict) in two datasets of one entity; Chromium renders it (`--dump-dom`: the SVG
marks and table rows are in the rendered document; `--screenshot`: the bars are painted, counted
by their colour in the PNG). Skipped, saying why, where /usr/bin/chromium is missing
(`apt-get install -y chromium`)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
import yaml

from lakepub.generate import generate_stream
from tests.conftest import write_jsonl
from tests.test_lineage import CURRENT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BAR_RGB = (0x3B, 0x78, 0xC3)  # svg .bar fill in report/html.py


@pytest.fixture
def report_ws(ws_path: Path, cli):
    (ws_path / "catalog" / "datasets" / "orders_current.yaml").write_text(yaml.safe_dump(CURRENT, sort_keys=False))
    generate_stream(ws_path / "landing" / "orders", events=2400, partitions=2, days=75, seed=5, segment_size=300)
    assert cli("run", "orders_daily", "--max-batch", "500").code == 0
    first = next((ws_path / "landing" / "orders" / "p0").glob("*.jsonl")).read_text().splitlines()[0]
    clash = {**yaml.safe_load(first), "cents": 1}  # same (key, version), other payload: refused
    path = write_jsonl(ws_path / "clash.jsonl", [clash])
    assert cli("publish", "orders_daily", "--events", str(path), "--source", "fixes", "--start", "{}",
               "--end", '{"p0": 1}').code == 3
    return ws_path


def test_report_is_self_contained_and_complete(report_ws: Path, cli, tmp_path: Path):
    out = tmp_path / "r" / "report.html"
    res = cli("report", "--out", str(out))
    assert res.code == 0, res.err
    assert "orders_current" in res.out and "orders_daily" in res.out
    page = out.read_text()
    assert "<script" not in page and " src=" not in page and "<link" not in page
    assert not re.findall(r"https?://(?!www\.w3\.org/2000/svg)", page)  # the SVG namespace is not a fetch
    days = len(cli("query", "SELECT day FROM orders_daily", "--format", "json").json())
    daily = page[page.index('id="orders_daily"'):page.index('id="orders_current"')] \
        if page.index('id="orders_daily"') < page.index('id="orders_current"') else page[page.index('id="orders_daily"'):]
    cents_chart = daily[daily.index('data-chart="measure-cents"'):]
    assert cents_chart[:cents_chart.index("</svg>")].count('class="bar"') == days
    log = cli("log", "orders_daily", "--format", "json").json()
    publishes = daily[daily.index('class="publishes"'):]
    assert publishes[:publishes.index("</table>")].count("<tr>") == len(log) + 1  # + header
    assert "payload conflicts</td><td class=\"num\">1<" in daily and 'class="ok"' in daily
    assert 'class="events"' in daily and 'class="changes"' in daily
    current = page[page.index('id="orders_current"'):]
    rows_chart = current[current.index('data-chart="measure-rows"'):]
    months = cli("query", "SELECT DISTINCT strftime(day, '%Y-%m') FROM orders_current", "--format", "json").json()
    assert rows_chart[:rows_chart.index("</svg>")].count('class="bar"') == len(months)
    bad = cli("report", "nope", "--out", str(out))
    assert bad.code == 2 and "unknown dataset" in bad.err


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium); "
                                             "the report's rendering is not checked")
def test_report_renders_in_headless_chromium(report_ws: Path, cli, tmp_path: Path):
    out = tmp_path / "report.html"
    assert cli("report", "orders_daily", "--out", str(out)).code == 0
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    days = len(cli("query", "SELECT day FROM orders_daily", "--format", "json").json())
    charts = re.findall(r'<svg[^>]*data-chart="([^"]+)"', rendered)
    assert {"measure-cents", "measure-orders", "timeline-events", "timeline-lag"} <= set(charts)
    assert rendered.count('class="bar"') >= 2 * days
    log = cli("log", "orders_daily", "--format", "json").json()
    table = rendered[rendered.index('class="publishes"'):]
    assert table[:table.index("</table>")].count("<tr>") == len(log) + 1
    shot = tmp_path / "report.png"
    res = subprocess.run([*flags, "--window-size=1280,1600", f"--screenshot={shot}", out.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    width, height, pixels = read_png(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    painted = sum(1 for p in pixels if p[:3] == BAR_RGB)
    assert painted > 5000, f"only {painted} pixels in the bar colour: the charts were not drawn"


def read_png(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) into pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    prev = bytearray(stride)
    pixels = []
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        pixels += [tuple(line[x * bpp:(x + 1) * bpp]) for x in range(width)]
        prev = line
    return width, height, pixels
