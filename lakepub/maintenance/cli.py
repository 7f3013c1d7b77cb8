"""``lakepub janitor``: the command, registered on the main group by ``register_cli(main)``.

Errors go through the same one-line handler as every other command (``lakepub.cli_support``).
Only click and the janitor's defaults are imported here; the command imports the janitor (and
with it pyiceberg) when it runs, so ``lakepub --help`` does not pay for it.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lakepub import output
from lakepub.cli_support import handle_errors
from lakepub.errors import LakepubError
from lakepub.maintenance.durations import DEFAULT_OLDER_THAN_S, DEFAULT_RETAIN_LAST, format_duration, parse_duration

if TYPE_CHECKING:
    from lakepub.maintenance.janitor import JanitorReport


class DeleteFailed(LakepubError):
    """Some unreferenced files could not be deleted (exit 1); the rest of the run completed."""


class _Bar:
    """A click progress bar on stderr per scan label, shown only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar: Any = None
        self._label: str | None = None
        self._done = 0

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if label != self._label or self._bar is None:
            self.close()
            self._bar = click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True)
            self._bar.__enter__()
            self._label, self._done = label, 0
        self._bar.update(done - self._done)
        self._done = done
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar, self._label = None, None


@click.command()
@click.argument("datasets", nargs=-1, metavar="[DATASET]...")
@click.option("--dry-run", is_flag=True, help="Report what would be expired and deleted; change nothing.")
@click.option("--older-than", default=format_duration(DEFAULT_OLDER_THAN_S), show_default=True,
              help="Expire snapshots older than this and delete unreferenced files modified before it "
                   "(grace for writers in flight), e.g. 0s, 90m, 12h, 3d.")
@click.option("--retain-last", type=click.IntRange(min=1), default=DEFAULT_RETAIN_LAST, show_default=True,
              help="Snapshots kept per branch (main included) whatever their age; counted in snapshots: "
                   "a publish that rewrites partitions writes two.")
@click.option("--format", "fmt", type=click.Choice(output.FORMATS), default="table", show_default=True,
              help="Output format.")
@click.pass_context
@handle_errors
def janitor(ctx: click.Context, datasets: tuple[str, ...], dry_run: bool, older_than: str, retain_last: int,
            fmt: str) -> None:
    """Expire old snapshots and delete unreferenced files of DATASET's tables (default: every
    dataset and the audit table).

    Keeps, whatever their age: the last --retain-last snapshots of each branch, every branch and
    tag head, the published snapshot, and main's history down to the newest checksum record of
    every live partition (so `lakepub verify` keeps working). Removes `lakepub-staging-*` branches
    whose head is older than --older-than. Never deletes a file modified within --older-than.

    It also deletes superseded table folders: a dataset's former folder (`X/` or
    `X__rebuild_<hex>/`) that an offline rebuild (`reconcile`, `rebuild`) swapped away from, once no
    catalog table lives there, every file in it is older than --older-than and a janitor run marked
    it superseded at least --older-than ago (the first run that finds it marks it).

    Without DATASET it first hard-deletes retired datasets whose `retire --grace` is over: their
    tables and files, their entity's ledger when no dataset of it remains, and the definitions
    (YAML) of them and of every dataset downstream (with their tables); --dry-run lists them."""
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor
    from lakepub.workspace import Workspace

    options = JanitorOptions(older_than_s=parse_duration(older_than), retain_last=retain_last, dry_run=dry_run)
    ws = Workspace.open((ctx.obj or {}).get("workspace", Path(".")))
    bar = _Bar(enabled=sys.stderr.isatty() and not (ctx.obj or {}).get("quiet"))  # lakepub -q: no bar
    try:
        report = run_janitor(ws, datasets, options, progress=bar)
    finally:
        bar.close()
    click.echo(output.to_json(report.as_dict()) if fmt == "json" else render_table(report))
    failed = sum(len(t.failed) for t in report.tables) + sum(len(f.failed) for f in report.superseded)
    if failed:
        raise DeleteFailed(f"{failed} file(s) could not be deleted; run the janitor again")


def render_table(report: JanitorReport) -> str:
    """The text report: one row per table, then warnings and a summary line."""
    rows = [[t.table, t.snapshots_expired, t.snapshots_kept, t.expired_files, t.orphan_files, t.young_files,
             t.files_removed, _bytes(t.bytes_removed if not t.dry_run else t.bytes_found),
             ",".join(t.staging_branches_removed) or "-"] for t in report.tables]
    headers = ["table", "expired", "kept", "expired files", "orphans", "young (kept)",
               "removed", "bytes", "staging removed"]
    lines = [output.table(headers, rows)]
    for t in report.tables:
        lines += [f"warning: {t.table}: {w}" for w in t.warnings]
        lines += [f"failed to delete: {p}" for p in t.failed]
    lines += _retired_lines(report)
    lines += _superseded_lines(report)
    totals = report.totals()
    grace = format_duration(report.options.grace)
    if report.options.dry_run:
        lines.append(f"dry run: would expire {totals['snapshots_expired']} snapshot(s) and delete "
                     f"{totals['files_found']} file(s), {_bytes(totals['bytes_found'])}; nothing was changed")
    else:
        lines.append(f"expired {totals['snapshots_expired']} snapshot(s); deleted {totals['files_removed']} "
                     f"file(s), {_bytes(totals['bytes_removed'])}")
    if totals["young_files"]:
        lines.append(f"kept {totals['young_files']} unreferenced file(s) younger than {grace} "
                     "(possibly a publish in flight)")
    return "\n".join(lines)


def _retired_lines(report: JanitorReport) -> list[str]:
    """Retired datasets hard-deleted (or, dry run, that would be) and those still in their grace."""
    retired = report.retired
    if retired is None:
        return []
    verb = "would hard-delete" if retired.dry_run else "hard-deleted"
    out = [f"{verb} {d.role} {d.name}: {d.reason}" + (f"; table {d.table}" if d.table else "")
           + (f"; definition {d.definition}" if d.definition else "")
           + (f"; {d.deleted_files} file(s)" if d.done else "") for d in retired.deleted]
    out += [f"retired {w['dataset']}: kept until {w['delete_after']} (lakepub restore {w['dataset']} undoes it)"
            for w in retired.waiting]
    out += [f"skipped {name}: restored or published while the janitor claimed it" for name in retired.skipped]
    return out


def _superseded_lines(report: JanitorReport) -> list[str]:
    """Table folders an offline rebuild left behind: deleted, to delete (dry run) or kept, and why."""
    grace = format_duration(report.options.grace)
    out = []
    for f in report.superseded:
        size = f"{f.files} file(s), {_bytes(f.bytes)}"
        if f.status == "young":
            out.append(f"kept superseded folder {f.folder} ({f.dataset}): a file is younger than {grace}")
        elif f.status in ("marked", "would mark"):
            since = datetime.fromtimestamp(f.first_seen, tz=timezone.utc).isoformat(timespec="seconds")
            out.append(f"{'marked' if f.status == 'marked' else 'would mark'} superseded folder {f.folder} "
                       f"({f.dataset}): superseded since {since}, deletable {grace} later (readers of its old "
                       "version may still read it)")
        elif f.status == "claimed":
            out.append(f"kept superseded folder {f.folder} ({f.dataset}): a table was created there meanwhile")
        elif f.status == "would delete":
            out.append(f"would delete superseded folder {f.folder} ({f.dataset}): {size}")
        else:
            out.append(f"deleted superseded folder {f.folder} ({f.dataset}): {f.files_removed} file(s), "
                       f"{_bytes(f.bytes_removed)}" + (f"; {len(f.failed)} failed" if f.failed else ""))
            out += [f"failed to delete: {p}" for p in f.failed]
    return out


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def register_cli(main: click.Group) -> None:
    """Add ``janitor`` to the ``lakepub`` group (idempotent)."""
    if "janitor" not in main.commands:
        main.add_command(janitor, "janitor")
