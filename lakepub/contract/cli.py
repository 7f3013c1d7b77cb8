"""``lakepub contract lint|check|export`` and ``lakepub consumers``, registered by ``register_cli(main)``.

Nothing heavy is imported at module level (the contract model pulls in pyarrow and pyiceberg,
``check`` and ``consumers`` the workspace configuration, recording pulls sqlglot): each command
imports what it needs, so ``lakepub --help`` stays fast.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from lakepub import output
from lakepub.cli_support import format_option, handle_errors
from lakepub.errors import ConfigError, LakepubError


class ContractCheckFailed(LakepubError):
    """Lint or check found at least one error (exit 1); the findings are printed."""


def _root(ctx: click.Context, required: bool) -> Path | None:
    from lakepub.config import find_root

    try:
        return find_root(Path((ctx.obj or {}).get("workspace", ".")))
    except ConfigError:
        if required:
            raise
        return None


def _workspace_config(root: Path | None) -> Any:
    from lakepub.config import load_workspace

    return load_workspace(root) if root is not None else None


def _contract_path(arg: str, root: Path | None) -> Path:
    """A file, or a schema_ref (``contracts/name@vX.Y``) in the workspace's catalog."""
    path = Path(arg)
    if path.is_file() or root is None or not arg.startswith("contracts/"):
        return path
    config = _workspace_config(root)
    for candidate in sorted((config.root / config.catalog_dir / "contracts").glob("*.yaml")):
        if candidate.stem == arg.removeprefix("contracts/"):
            return candidate
    return path


@click.group("contract")
def contract() -> None:
    """Contracts as a change protocol: lint a contract, check a change, promote it through its
    lifecycle, export a manifest."""


@contract.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--at", "at", default=None, help="Evaluate grace periods on this date (YYYY-MM-DD; default today, UTC).")
@format_option
@click.pass_context
@handle_errors
def lint(ctx: click.Context, paths: tuple[Path, ...], at: str | None, fmt: str) -> None:
    """Check contract files (default: the workspace's catalog/contracts) against seed 001's rules.

    One line per finding: FILE:LINE RULE-ID LEVEL MESSAGE. Exit 1 on any error; inside a
    contract's declared grace_period its errors are reported as warnings."""
    from lakepub.contract.lint import lint_paths

    today = _date(at)
    if not paths:
        config = _workspace_config(_root(ctx, required=True))
        paths = (config.root / config.catalog_dir / "contracts",)
    findings = lint_paths(list(paths), today)
    errors = sum(f.level == "error" for f in findings)
    if fmt == "json":
        click.echo(output.to_json({"findings": [f.as_dict() for f in findings], "errors": errors,
                                   "warnings": len(findings) - errors}))
    else:
        for f in findings:
            click.echo(f.text())
        click.echo(f"{errors} error(s), {len(findings) - errors} warning(s)", err=True)
    if errors:
        raise ContractCheckFailed(f"contract lint: {errors} error(s)")


def _date(text: str | None, option: str = "--at") -> dt.date:
    if text is None:
        return dt.datetime.now(dt.timezone.utc).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not a date (YYYY-MM-DD)") from None


@contract.command("check")
@click.argument("versions", nargs=-1, required=True, metavar="OLD... NEW")
@format_option
@click.pass_context
@handle_errors
def check(ctx: click.Context, versions: tuple[str, ...], fmt: str) -> None:
    """Check that NEW is a safe change of OLD in the direction NEW's compat_mode names.

    backward: NEW reads OLD's data; forward: OLD reads NEW's data; both: both, against every OLD
    given (oldest first); break: allowed with a major version and shadow.enabled. Also checks the
    version bump (minor: compatible, major: breaking) and reports semantic changes (unit,
    description, time meaning, default, declared change.semantic), each with its failure mode and
    the consumers it affects (declared, and observed by `lakepub query`). Exit 1 on any error.
    Arguments are files or schema refs (contracts/NAME@vX.Y) of the workspace's catalog."""
    from lakepub.contract import compat
    from lakepub.contract.consumers import Affected
    from lakepub.contract.model import load_contract, load_contracts
    from lakepub.yamlfile import key_lines, line_of

    if len(versions) < 2:
        raise ConfigError("contract check needs at least two contracts: OLD... NEW")
    root = _root(ctx, required=False)
    paths = [_contract_path(v, root) for v in versions]
    contracts = [load_contract(p) for p in paths]
    names = {c.name for c in contracts}
    if len(names) != 1:
        raise ConfigError(f"contract check compares versions of one contract, not {', '.join(sorted(names))}")
    try:
        config = _workspace_config(root)
    except LakepubError:  # a broken workspace: check without its datasets
        config = None
    others = load_contracts(config.root / config.catalog_dir / "contracts") if config else []
    affected = Affected(root, config.datasets if config else {}, others)
    result = compat.check(contracts[:-1], contracts[-1], affected)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
    else:
        lines = {p: key_lines(p.read_text()) for p in paths}
        by_ref = {c.schema_ref: p for c, p in zip(contracts, paths)}
        for f in result.findings:
            path = paths[-1] if f.field is None or f.field in contracts[-1].names else by_ref.get(f.against, paths[-2])
            line = line_of(lines[path], _key_path(f))
            extra = f" [failure: {f.failure_mode}]" if f.failure_mode else ""
            extra += f" [consumers: {'; '.join(f.consumers)}]" if f.consumers else ""
            click.echo(f"{path}:{line} {f.rule} {f.level} {f.message}{extra}")
        kind = "breaking" if result.breaking else "compatible"
        click.echo(f"{result.new} vs {', '.join(result.old)} ({result.mode}): {kind}, "
                   f"{'ok' if result.ok else 'refused'}", err=True)
    if not result.ok:
        raise ContractCheckFailed(f"contract check: {sum(f.level == 'error' for f in result.findings)} error(s)")


def _key_path(f: Any) -> tuple[str, ...]:
    if f.rule == "SEMANTIC.CHANGED" and f.message.split(": ", 1)[-1].startswith("declared"):
        return ("change", "semantic")
    if f.field:
        return ("fields", f.field)
    if f.rule.startswith("VERSION"):
        return ("version",)
    if f.rule == "COMPAT.PARTITION_CHANGED":
        return ("constraints", "partition_by")
    if f.rule == "COMPAT.KEY_CHANGED":
        return ("entity",)
    return ()


@contract.command("export")
@click.argument("contract_ref")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("export"),
              show_default=True, help="Folder to write the schema JSON and export_manifest.json into.")
@click.option("--artifact", "artifacts", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Another artifact to list with its sha256 (changelog.md, dq.report.jsonl, shadow.diff.csv); repeatable.")
@format_option
@click.pass_context
@handle_errors
def export(ctx: click.Context, contract_ref: str, out_dir: Path, artifacts: tuple[Path, ...], fmt: str) -> None:
    """Write CONTRACT's canonical schema JSON and an export_manifest (seed 001 section X): every
    artifact with its sha256, and the contract's change references. The schema JSON's sha256 is
    the contract sha256 that publishes record on their snapshots."""
    from lakepub.contract.model import load_contract

    path = _contract_path(contract_ref, _root(ctx, required=False))
    c = load_contract(path)
    schema = c.canonical.encode("utf-8")
    schema_path = out_dir / "contracts" / f"{c.name}@v{c.version}.schema.json"
    schema_path.parent.mkdir(parents=True, exist_ok=True)
    schema_path.write_bytes(schema)
    listed = [{"path": str(schema_path.relative_to(out_dir)), "sha256": hashlib.sha256(schema).hexdigest(),
               "bytes": len(schema)}]
    listed += [{"path": str(a), "sha256": hashlib.sha256(a.read_bytes()).hexdigest(), "bytes": a.stat().st_size}
               for a in artifacts]
    manifest = {"export_manifest": {
        "version": "v1.0", "contract": c.schema_ref, "contract_sha256": c.sha256, "status": c.terms.status,
        "compat_mode": c.terms.mode, "artifacts": listed, "references": list(c.terms.change.references),
        "lineage": {"produce": list(c.terms.lineage_bind.produce), "consume": list(c.terms.lineage_bind.consume)},
    }}
    (out_dir / "export_manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if fmt == "json":
        click.echo(output.to_json(manifest))
        return
    click.echo(f"exported {c.schema_ref} (sha256 {c.sha256}) to {out_dir}/export_manifest.json")
    click.echo(output.table(["artifact", "sha256", "bytes"], [[a["path"], a["sha256"], a["bytes"]] for a in listed]))


@contract.command("promote")
@click.argument("contract_ref")
@click.option("--to", "target", required=True, metavar="STATE",
              help="PROPOSED VALIDATED CANARY DUAL_WRITE DEFAULT DEPRECATED RETIRED.")
@click.option("--since", default=None,
              help="Count consumers observed since this date (YYYY-MM-DD; default: the grace period's start, else 30 days ago).")
@click.option("--at", "at", default=None, help="Evaluate dates as of this day (YYYY-MM-DD; default today, UTC).")
@click.option("--dry-run", is_flag=True, help="Only check the conditions; change nothing.")
@format_option
@click.pass_context
@handle_errors
def promote(ctx: click.Context, contract_ref: str, target: str, since: str | None, at: str | None, dry_run: bool,
            fmt: str) -> None:
    """Move CONTRACT to the lifecycle state STATE (its file's status: line), checking that
    state's conditions: lint clean and check passed (VALIDATED), a passing shadow run of every
    dataset of the contract (CANARY, DEFAULT), no observed consumer of a removed column (DEFAULT,
    RETIRED), a DEFAULT replacement (DEPRECATED), grace period over and no dataset naming it
    (RETIRED). DUAL_WRITE (a breaking major version): 'lakepub run' then builds DATASET__vN
    beside each dataset and publishes both in one commit; DEFAULT from it swaps the new version
    in atomically, keeps the old one as DATASET__vM and points the dataset files at it. Exit 3
    naming every failed condition; nothing changes then."""
    from lakepub.contract.lifecycle import promote as run_promote

    root = _root(ctx, required=True)
    config = _workspace_config(root)
    path = _contract_path(contract_ref, root)
    result = run_promote(config, path, target.upper(), today=_date(at),
                         since=_date(since, "--since") if since else None, dry_run=dry_run)
    if fmt == "json":
        click.echo(output.to_json(result.as_dict()))
        return
    for c in result.conditions:
        click.echo(f"  {'ok ' if c.ok else 'NO '} {c.name}: {c.detail}")
    verb = "would move" if dry_run else "moved"
    click.echo(f"{verb} {result.contract} {result.from_state} -> {result.to_state}"
               + ("" if dry_run else f" ({result.path}: status: {result.to_state})"))


@click.command("consumers")
@click.argument("dataset")
@format_option
@click.pass_context
@handle_errors
def consumers(ctx: click.Context, dataset: str, fmt: str) -> None:
    """Who reads DATASET: the columns `lakepub query`, Workspace.query and Workspace.connect
    statements actually read (by consumer: $LAKEPUB_CONSUMER or the OS user; with last-seen
    time), and the consumers its contract declares."""
    from lakepub.contract.consumers import observed

    config = _workspace_config(_root(ctx, required=True))
    spec = config.dataset(dataset)
    reads = observed(config.root, dataset)
    declared = [{"name": c.name, "owner": c.owner, "columns": list(c.columns)} for c in spec.contract.terms.consumers]
    if fmt == "json":
        click.echo(output.to_json({"dataset": dataset, "contract": spec.contract.schema_ref,
                                   "observed": [r.as_dict() for r in reads], "declared": declared}))
        return
    if reads:
        click.echo(output.table(["column", "consumer", "via", "last seen", "first seen", "reads"],
                                [[r.column or "(rows)", r.consumer, r.via, r.last_seen, r.first_seen, r.reads]
                                 for r in reads]))
    else:
        click.echo(f"no reads of {dataset} recorded yet")
    for d in declared:
        click.echo(f"declared: {d['name']}" + (f" (owner {d['owner']})" if d["owner"] else "")
                   + (f" reads {', '.join(d['columns'])}" if d["columns"] else ""))


@click.command("shadow")
@click.argument("dataset")
@click.option("--contract", "contract_ref", required=True,
              help="The new contract version: a file, or a schema ref (contracts/NAME@vX.Y) of the catalog.")
@click.option("--from", "start", default=None,
              help='Landing position to start from, e.g. \'{"p0": 1000}\' (default: the beginning of the source).')
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for shadow.diff.csv and shadow.summary.json "
                   "(default: <workspace>/.lakepub/shadow/DATASET/<new schema ref>, where `contract promote` looks).")
@click.option("--max-batch", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Most records per scratch publish.")
@format_option
@click.pass_context
@handle_errors
def shadow(ctx: click.Context, dataset: str, contract_ref: str, start: str | None, out_dir: Path | None,
           max_batch: int, fmt: str) -> None:
    """Run DATASET under a new contract version beside its current one, on the same landing input
    (up to the published position), without publishing either; compare by key, partition and
    column, and write shadow.diff.csv and shadow.summary.json.

    Exit 3 when the difference is beyond the new contract's shadow.thresholds (max_relative_diff,
    max_changed, max_only_old, max_only_new, max_changed_fraction; each 0 unless given)."""
    from lakepub import positions
    from lakepub.contract.model import load_contract
    from lakepub.contract.shadow import ShadowGateFailed, run_shadow
    from lakepub.workspace import Workspace

    root = _root(ctx, required=True)
    ws = Workspace.open(root)
    new = load_contract(_contract_path(contract_ref, root))
    begin = positions.parse_vector(start, "--from") if start else None
    bar: Any = None
    # A bar on a terminal only: elsewhere click printed its label alone, a second line before an error.
    if fmt != "json" and sys.stderr.isatty() and not (ctx.obj or {}).get("quiet"):
        pending = 2 * sum(ws.committed_positions(dataset).get(ws.dataset(dataset).source, {}).values())
        pending -= 2 * sum((begin or {}).values())
        bar = click.progressbar(length=max(pending, 0), label=f"shadow {dataset}", file=sys.stderr, show_pos=True)
        bar.__enter__()
    try:
        result = run_shadow(ws, dataset, new, start=begin, out_dir=out_dir, max_batch=max_batch,
                            on_batch=lambda side, n: bar.update(n) if bar is not None else None)
        failed = None
    except ShadowGateFailed as exc:
        result, failed = None, exc
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    summary = (failed.result if failed is not None else result).as_dict()
    click.echo(output.to_json(summary) if fmt == "json" else _shadow_text(summary))
    if failed is not None:
        raise failed


def _shadow_text(s: dict[str, Any]) -> str:
    lines = [f"shadow {s['dataset']}: {s['new']} vs {s['old']} on {s['events']} events "
             f"({s['source']} {json.dumps(s['start'])} -> {json.dumps(s['end'])}), key {', '.join(s['row_key']) or '(none)'}",
             f"  rows: {s['rows_old']} old, {s['rows_new']} new; only old {s['only_old']}, only new {s['only_new']}, "
             f"changed {s['changed']}, unchanged {s['unchanged']}"]
    for col, worst in sorted(s["max_relative_diff"].items()):
        lines.append(f"  max relative difference {col}: {worst:.6g}")
    if s["columns_only_old"] or s["columns_only_new"]:
        lines.append(f"  columns only old: {', '.join(s['columns_only_old']) or '-'}; "
                     f"only new: {', '.join(s['columns_only_new']) or '-'}")
    for part, counts in list(s["partitions"].items())[:10]:
        lines.append(f"  partition {part}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if len(s["partitions"]) > 10:
        lines.append(f"  ... {len(s['partitions']) - 10} more partition(s) differ")
    lines.append(f"  wrote {s['diff_path']} and {s['summary_path']}")
    lines.append("  gate: " + ("passed" if s["ok"] else "FAILED: " + "; ".join(s["breaches"])))
    return "\n".join(lines)


def register_cli(main: click.Group) -> None:
    """Add ``contract`` (lint, check, export, promote), ``consumers`` and ``shadow`` to the ``lakepub``
    group (idempotent)."""
    for name, command in (("contract", contract), ("consumers", consumers), ("shadow", shadow)):
        if name not in main.commands:
            main.add_command(command, name)
