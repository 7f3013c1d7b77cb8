"""Regenerate docs/report.png (the README's picture of `lakepub report`).

Builds a workspace in a temporary folder with the orders stream (corrections, duplicates, late
versions, deletes) published into orders_daily and a current-state dataset of the same entity,
writes the report and screenshots it with headless Chromium (Debian: apt-get install -y chromium):

    python scripts/report_screenshot.py [--out docs/report.png] [--html docs/report.html]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from click.testing import CliRunner

from lakepub.cli import main
from lakepub.generate import generate_stream
from lakepub.init import init_workspace

CURRENT = {"name": "orders_current", "source": "orders", "contract": "contracts/orders@v1.0",
           "entity": "orders_daily", "projection": {"kind": "current", "columns": ["order_id", "day", "cents"]},
           "partition": "month(day)"}


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        sys.exit(f"lakepub {' '.join(args)} failed: {result.output}")
    return result.output


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/report.png"))
    parser.add_argument("--html", type=Path, default=None, help="also keep the HTML page here")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "shop"
        init_workspace(ws)
        (ws / "catalog" / "datasets" / "orders_current.yaml").write_text(yaml.safe_dump(CURRENT, sort_keys=False))
        generate_stream(ws / "landing" / "orders", events=20_000, partitions=2, days=60, seed=7, segment_size=2000)
        run("-w", str(ws), "run", "orders_daily", "--max-batch", "2500")
        page = Path(tmp) / "report.html"
        run("-w", str(ws), "report", "orders_daily", "--out", str(page))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={Path(tmp) / 'profile'}", "--window-size=1340,1500",
                        f"--screenshot={args.out.resolve()}", page.as_uri()], check=True, capture_output=True)
        if args.html is not None:
            shutil.copyfile(page, args.html)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main_()
