"""``lakepub contract promote REF --to STATE``: a contract version's lifecycle, one checked step at a time.

Seed 002: a change is a sequence of states, PROPOSED -> VALIDATED -> CANARY -> DUAL_WRITE ->
DEFAULT -> DEPRECATED -> RETIRED, "each transition has conditions ... it is not an approval
record". The state is the contract file's ``status:`` (absent: PROPOSED), so it lives in the
declarative catalog beside the contract and is reviewed like it; a promotion checks its
conditions against the workspace, then rewrites that one line (comments and layout kept) and
appends what it checked to ``<workspace>/.lakepub/lifecycle.jsonl``. A refused promotion changes
nothing and exits 3 naming every failed condition and what to do.

Moves: one step forward; VALIDATED or CANARY straight to DEFAULT for a compatible change (no
dual-write window is needed when old readers read new data); back from CANARY or DUAL_WRITE to
VALIDATED (the rollback switch), unconditionally. Conditions, cumulative along the way:

* VALIDATED: ``contract lint`` finds no error in the file; ``contract check`` against the earlier
  versions of the contract in the catalog passes.
* CANARY: and, for every dataset whose contract has this name, a passing ``lakepub shadow`` of
  *this content* of the file (the summary's sha256 of the contract, status aside, must match).
* DUAL_WRITE: and a major version above the one the datasets publish, an atomic SQL catalog,
  the datasets' projections re-derived under it (``contract/dual_write.py``); ``lakepub run``
  then builds the new version beside the published one and publishes both in one commit
  (``publish/dual.py``). A breaking version may also move CANARY -> DEFAULT directly when it
  declares a ``grace_period`` (its migration window), as a new line with no dual write.
* DEFAULT from DUAL_WRITE: and the new version's tables at the published positions; the
  promotion swaps them in (one catalog transaction) and rewrites the dataset files' ``contract:``.
* DEFAULT: and no consumer observed since ``--since`` (default: the grace period's start, else
  30 days ago) reads a column that this version removes from the previous one.
* DEPRECATED: a newer version of the contract is DEFAULT.
* RETIRED: from DEPRECATED; the replacing version's grace period (if any) is over; no dataset
  of the workspace still names this version; no consumer observed since ``--since`` reads a
  column of this version that the DEFAULT version lacks.

Observed consumers are matched by column name on the datasets of the contract (a published
column named like the removed field); a renamed column in a projection is not followed. Cost:
one lint, one check and a few small file reads; no table is opened.
"""

from __future__ import annotations

import datetime as dt
import getpass
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lakepub.contract.spec import LIFECYCLE
from lakepub.errors import BlockedError, ConfigError

_COMPATIBLE_SKIPS = {("VALIDATED", "DEFAULT"), ("CANARY", "DEFAULT")}
_ROLLBACKS = {("CANARY", "VALIDATED"), ("DUAL_WRITE", "VALIDATED")}


class PromotionRefused(BlockedError):
    """A lifecycle condition does not hold (exit 3); nothing was changed."""


@dataclass(frozen=True)
class Condition:
    name: str
    ok: bool
    detail: str


@dataclass
class Promotion:
    contract: str
    path: str
    from_state: str
    to_state: str
    conditions: list[Condition] = field(default_factory=list)
    applied: bool = False

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.conditions)

    def as_dict(self) -> dict[str, Any]:
        return {"contract": self.contract, "path": self.path, "from": self.from_state, "to": self.to_state,
                "ok": self.ok, "applied": self.applied, "conditions": [asdict(c) for c in self.conditions]}


def content_sha256(contract: Any) -> str:
    """The contract's canonical sha256 without its ``status``: what a shadow run compared (a
    promotion rewrites the status, not the content)."""
    doc = json.loads(contract.canonical)
    doc.pop("status", None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def state_of(contract: Any) -> str:
    return contract.terms.status or "PROPOSED"


def promote(config: Any, path: Path, target: str, *, today: dt.date | None = None,
            since: dt.date | None = None, dry_run: bool = False) -> Promotion:
    """Check the move of the contract at ``path`` to ``target``; apply it unless ``dry_run``.
    Raises PromotionRefused (exit 3) when a condition fails, ConfigError for a move that is not one."""
    from lakepub.contract.model import load_contract

    today = today or dt.datetime.now(dt.timezone.utc).date()
    contract = load_contract(path)
    current = state_of(contract)
    if target not in LIFECYCLE:
        raise ConfigError(f"--to: {target!r} is not a lifecycle state ({' -> '.join(LIFECYCLE)})")
    versions = _versions(config, contract)
    earlier = [c for c in versions if _vkey(c) < _vkey(contract)]
    result = Promotion(contract.schema_ref, str(path), current, target)
    move = (current, target)
    if move in _ROLLBACKS:
        result.conditions.append(Condition("rollback", True, f"{current} -> {target} is the rollback switch"))
    else:
        step = LIFECYCLE.index(target) - LIFECYCLE.index(current)
        if step != 1 and move not in _COMPATIBLE_SKIPS:
            raise ConfigError(f"{path}: status: {current} -> {target} is not a lifecycle move; from {current} the "
                              f"next state is {_next(current)}")
        since = since or _since(contract, today)
        _conditions(result, config, contract, path, earlier, versions, move, today, since)
        if target == "DUAL_WRITE" or move == ("DUAL_WRITE", "DEFAULT"):  # contract/dual_write.py
            from lakepub.contract import dual_write

            result.conditions += (dual_write.enter_conditions(config, contract) if target == "DUAL_WRITE"
                                  else dual_write.leave_conditions(config, contract))
    if not result.ok:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in result.conditions if not c.ok)
        raise PromotionRefused(f"{contract.schema_ref}: {current} -> {target} refused ({failed}); nothing was changed")
    if not dry_run:
        if move == ("DUAL_WRITE", "DEFAULT"):  # the new version's tables swapped in, the dataset files rewritten
            from lakepub.contract import dual_write

            files = dual_write.swap(config, contract)
            result.conditions.append(Condition("swap", True, "the new version's tables are the published ones; "
                                               f"contract: rewritten in {', '.join(files) or '(no file)'}"))
        _write_status(path, target, contract.schema_ref)
        _record(config.root, result, today)
        result.applied = True
    return result


def _conditions(result: Promotion, config: Any, contract: Any, path: Path, earlier: list[Any], versions: list[Any],
                move: tuple[str, str], today: dt.date, since: dt.date) -> None:
    from lakepub.contract import compat
    from lakepub.contract.consumers import Affected
    from lakepub.contract.lint import lint_file

    add = result.conditions.append
    target = move[1]
    order = LIFECYCLE.index(target)
    if order <= LIFECYCLE.index("DEFAULT"):
        errors = [f for f in lint_file(path, today) if f.level == "error"]
        add(Condition("lint", not errors, "no errors" if not errors else
                      f"{len(errors)} error(s), first {errors[0].rule}: run 'lakepub contract lint {path}'"))
        if earlier:
            check = compat.check(earlier, contract, Affected(config.root, config.datasets, versions))
            bad = [f for f in check.findings if f.level == "error"]
            add(Condition("check", check.ok, f"compatible with {earlier[-1].schema_ref}" if check.ok and not check.breaking
                          else f"breaking change of {earlier[-1].schema_ref} ({contract.terms.mode})" if check.ok
                          else f"{len(bad)} error(s), first {bad[0].rule}: run 'lakepub contract check'"))
            if target == "DEFAULT" and move[0] != "DUAL_WRITE" and check.breaking and contract.terms.grace_period is None:
                add(Condition("migration window", False, "a breaking version skips DUAL_WRITE only with a declared "
                              "grace_period (the window in which consumers migrate)"))
        else:
            add(Condition("check", True, "first version of the contract"))
    if LIFECYCLE.index("CANARY") <= order <= LIFECYCLE.index("DEFAULT"):
        _shadow_condition(add, config, contract)
    if target == "DEFAULT" and earlier:
        removed = [n for n in earlier[-1].names if n not in contract.names]
        add(_readers_condition(config, contract, removed, since, f"removed by {contract.schema_ref}"))
    if target == "DEPRECATED":
        newer = [c for c in versions if _vkey(c) > _vkey(contract) and state_of(c) == "DEFAULT"]
        add(Condition("replacement", bool(newer), f"{newer[-1].schema_ref} is DEFAULT" if newer else
                      "no newer version of the contract is DEFAULT yet: promote the replacement first"))
    if target == "RETIRED":
        default = [c for c in versions if state_of(c) == "DEFAULT"]
        users = sorted(n for n, s in config.datasets.items() if s.contract.schema_ref == contract.schema_ref)
        add(Condition("datasets", not users, "no dataset names it" if not users else
                      f"dataset(s) {', '.join(users)} still name {contract.schema_ref}: point their contract: at the "
                      "DEFAULT version"))
        window = default[-1].terms.grace_period if default else None
        over = window is None or today > window.end
        add(Condition("grace period", over, "over" if window is None or over else
                      f"{default[-1].schema_ref}'s grace period runs until {window.end}"))
        gone = [n for n in contract.names if not default or n not in default[-1].names]
        add(_readers_condition(config, contract, gone, since, "absent from the DEFAULT version"))


def _shadow_condition(add: Any, config: Any, contract: Any) -> None:
    from lakepub.contract.shadow import SUMMARY_FILE, default_out

    own = sorted(n for n, s in config.datasets.items() if s.contract.name == contract.name)
    if not own:
        add(Condition("shadow", True, "no dataset publishes this contract"))
        return
    want = content_sha256(contract)
    for name in own:
        summary_path = default_out(config.root, name, contract) / SUMMARY_FILE
        if not summary_path.is_file():
            add(Condition("shadow", False, f"no shadow run of {name}: run 'lakepub shadow {name} --contract "
                          f"{contract.schema_ref}'"))
            continue
        summary = json.loads(summary_path.read_text())
        if summary.get("content_sha256") != want:
            add(Condition("shadow", False, f"the shadow run of {name} compared another content of "
                          f"{contract.schema_ref}: run 'lakepub shadow {name} --contract {contract.schema_ref}' again"))
        elif not summary.get("ok"):
            add(Condition("shadow", False, f"the shadow run of {name} failed its thresholds "
                          f"({'; '.join(summary.get('breaches', []))})"))
        else:
            add(Condition("shadow", True, f"{name}: {summary.get('unchanged', 0)} rows agree, "
                          f"{summary.get('only_old', 0) + summary.get('only_new', 0) + summary.get('changed', 0)} differ "
                          "within thresholds"))


def _readers_condition(config: Any, contract: Any, columns: list[str], since: dt.date, why: str) -> Condition:
    from lakepub.contract.consumers import observed

    if not columns:
        return Condition("consumers", True, f"no column {why}")
    own = {n for n, s in config.datasets.items() if s.contract.name == contract.name}
    cutoff = since.isoformat()
    still = [r for r in observed(config.root) if r.dataset in own and r.column in columns and r.last_seen >= cutoff]
    if not still:
        return Condition("consumers", True, f"no consumer read {', '.join(columns)} since {since}")
    named = "; ".join(f"{r.consumer} reads {r.dataset}.{r.column} (last seen {r.last_seen}, via {r.via})"
                      for r in still[:5])
    return Condition("consumers", False, f"column(s) {why} are still read since {since}: {named}")


def _since(contract: Any, today: dt.date) -> dt.date:
    window = contract.terms.grace_period
    return window.start if window is not None else today - dt.timedelta(days=30)


def _versions(config: Any, contract: Any) -> list[Any]:
    from lakepub.contract.model import load_contracts

    folder = config.root / config.catalog_dir / "contracts"
    found = [c for c in load_contracts(folder) if c.name == contract.name] if folder.is_dir() else []
    found = [c for c in found if c.schema_ref != contract.schema_ref] + [contract]
    return sorted(found, key=_vkey)


def _vkey(contract: Any) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in str(contract.version).split("."))


def _next(state: str) -> str:
    i = LIFECYCLE.index(state)
    return LIFECYCLE[i + 1] if i + 1 < len(LIFECYCLE) else "(none: RETIRED is the last state)"


_STATUS_LINE = re.compile(r"^status:[ \t]*([^#\n]*?)[ \t]*(#.*)?$", re.MULTILINE)


def _write_status(path: Path, target: str, ref: str) -> None:
    """Rewrite the top-level ``status:`` line (or append one), then re-read the file to be sure."""
    from lakepub.contract.model import load_contract

    text = path.read_text()
    match = _STATUS_LINE.search(text)
    if match:
        comment = f"  {match.group(2)}" if match.group(2) else ""
        new = text[:match.start()] + f"status: {target}{comment}" + text[match.end():]
    else:
        new = text + ("" if text.endswith("\n") else "\n") + f"status: {target}\n"
    tmp = path.with_name(f".{path.name}.promote")
    tmp.write_text(new)
    os.replace(tmp, path)
    try:
        written = load_contract(path)
    except Exception:
        path.write_text(text)
        raise
    if state_of(written) != target:  # pragma: no cover - the line rewritten was not the contract's status
        path.write_text(text)
        raise ConfigError(f"{path}: could not rewrite its status line; set status: {target} by hand ({ref})")


def _record(root: Path, result: Promotion, today: dt.date) -> None:
    log = Path(root) / ".lakepub" / "lifecycle.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        who = os.environ.get("LAKEPUB_CONSUMER") or getpass.getuser()
    except Exception:  # no user name in this environment
        who = "unknown"
    entry = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "by": who, **result.as_dict()}
    entry["applied"] = True
    with log.open("a") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def history(root: Path, ref: str | None = None) -> list[dict[str, Any]]:
    """The recorded promotions (of one schema ref), oldest first."""
    log = Path(root) / ".lakepub" / "lifecycle.jsonl"
    if not log.is_file():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in entries if ref is None or e["contract"] == ref]
