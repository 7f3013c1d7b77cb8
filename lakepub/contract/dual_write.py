"""The lifecycle's DUAL_WRITE window: the conditions to enter it, and the swap that ends it.

``contract promote NAME@vM.0 --to DUAL_WRITE`` (from CANARY) checks, besides CANARY's conditions
(lint, check, a passing shadow run of this content for every dataset of the contract):

* **major version**: the version's major is above the one the datasets of the contract publish
  (a compatible version needs no window: it evolves in place, CANARY -> DEFAULT);
* **atomic commit**: the catalog is a SQL catalog whose commit mode is atomic (both versions
  move in one database transaction, ``publish/dual.py``);
* **projection**: every dataset's projection and partition re-derive under the new contract
  (a column the new version drops from a dataset's ``columns:`` is refused naming the file);
* **free names**: no table ``<dataset>__v<OLD MAJOR>`` (nor ledger or rejects table of
  ``<entity>__v<OLD MAJOR>``) exists: the names the old version keeps after the swap.

From then on ``lakepub run`` builds ``<dataset>__v<MAJOR>`` beside each dataset and publishes both
in one commit per batch (``publish/dual.py``).

``--to DEFAULT`` from DUAL_WRITE adds **caught up**: every new table records the same positions
as its published counterpart (run ``lakepub run`` first). It then swaps, in ONE catalog
transaction asserting every pointer it read (``store/commit.exchange_tables``): each published
name (ledger, datasets, and the rejects table when both versions have one; a rejects table of the new version alone is renamed to the published name) points at the new version's metadata, and the new version's entries
are renamed ``<table>__v<OLD MAJOR>``, pointing at the old version's metadata, kept for
DEPRECATED/RETIRED (a ``lakepub query`` view until the old contract file says RETIRED:
``publish/dual.kept_names``). Readers of ``customers_current`` see the old version until the COMMIT and the
new one after it. Then each dataset file's ``contract:`` line is rewritten to the new version and
the contract's status to DEFAULT. A crash after the swap and before the rewrite leaves the
tables on the new version and the files on the old one (publishes are refused as a contract
mismatch, exit 3); promoting again finds the swap done and finishes the rewrite. Cost: two table
loads per dataset and one small database transaction; no data is read or written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lakepub.contract.lifecycle import Condition
from lakepub.errors import BlockedError


def _groups(config: Any, contract: Any) -> list[Any]:
    """The entity groups that publish an earlier major version of ``contract``'s name."""
    from lakepub.publish.dual import major

    seen: dict[str, Any] = {}
    for name, spec in sorted(config.datasets.items()):
        if spec.contract.name == contract.name and major(spec.contract) < major(contract) and spec.entity not in seen:
            seen[spec.entity] = config.group(name)
    return list(seen.values())


def _catalog(config: Any) -> Any:
    from lakepub.store.catalog import open_catalog

    return open_catalog(config.catalog_name, config.catalog_properties())


def enter_conditions(config: Any, contract: Any) -> list[Condition]:
    """What DUAL_WRITE needs besides CANARY's conditions (see the module docstring)."""
    from lakepub.errors import ConfigError
    from lakepub.publish.dual import partner_group, suffix
    from lakepub.store.commit import commit_mode
    from lakepub.store.layout import ledger_id
    from lakepub.store.rejects import rejects_id

    groups = _groups(config, contract)
    out = [Condition("major version", bool(groups),
                     f"datasets {', '.join(n for g in groups for n in g.dataset_names)} publish "
                     f"{groups[0].contract.schema_ref}" if groups else
                     f"no dataset publishes an earlier major version of {contract.name}: a dual-write window is for a "
                     "breaking (major) version beside the published one")]
    if not groups:
        return out
    catalog = _catalog(config)
    mode = "?"
    try:
        mode = commit_mode(catalog, config.commit)
    except ConfigError as exc:
        mode = str(exc)
    out.append(Condition("atomic commit", mode == "atomic", "both versions move in one SQL catalog transaction"
                         if mode == "atomic" else f"the catalog commits in mode {mode!r}: DUAL_WRITE needs a SQL "
                         "catalog (SQLite or PostgreSQL) with commit: atomic or auto"))
    for group in groups:
        try:
            partner_group(group, contract)
            out.append(Condition("projection", True, f"{', '.join(group.dataset_names)} re-derive under "
                                 f"{contract.schema_ref}"))
        except ConfigError as exc:
            out.append(Condition("projection", False, f"{exc}: change the dataset's projection first"))
        kept = [n for n in (*(d + suffix(group.contract) for d in group.dataset_names),
                            ledger_id(config.namespace, group.name + suffix(group.contract))[1],
                            rejects_id(config.namespace, group.name + suffix(group.contract))[1])
                if catalog.table_exists((config.namespace, n))]
        out.append(Condition("free names", not kept, "the old version's tables can be kept as <table>"
                             f"{suffix(group.contract)}" if not kept else f"table(s) {', '.join(kept)} exist: the old "
                             "version is kept under these names after the swap; drop them first"))
    return out


def _pairs(config: Any, contract: Any, catalog: Any) -> tuple[list, list[str], bool]:
    """(swap pairs, lagging tables, already swapped) of every group of the contract."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakepub.lifecycle.retirement import iso, retirement_of
    from lakepub.publish.dual import suffix
    from lakepub.store.layout import ledger_id
    from lakepub.store.record import latest_record
    from lakepub.store.rejects import rejects_id

    ns = config.namespace
    pairs: list = []
    lagging: list[str] = []
    swapped = True
    groups = _groups(config, contract)
    if not groups and not _swapped_to(config, contract, catalog):
        return [], [f"no dataset publishes an earlier major version of {contract.name}, and none was swapped to "
                    f"{contract.schema_ref} (a table <entity>__v<M>__ledger kept by a swap): nothing to swap; move "
                    f"{contract.schema_ref} back (--to VALIDATED)"], False
    for group in groups:
        new_tail, old_tail = suffix(contract), suffix(group.contract)
        names = [(ledger_id(ns, group.name), ledger_id(ns, group.name + new_tail),
                  ledger_id(ns, group.name + old_tail))]
        names += [((ns, n), (ns, n + new_tail), (ns, n + old_tail)) for n in group.dataset_names]
        rejects = (rejects_id(ns, group.name), rejects_id(ns, group.name + new_tail),
                   rejects_id(ns, group.name + old_tail))
        if catalog.table_exists(rejects[0]) and catalog.table_exists(rejects[1]):  # lenient gates: swapped too
            names.append(rejects)
        if catalog.table_exists(names[0][2]) and not catalog.table_exists(names[0][1]):
            continue  # this group's swap landed (a promotion that stopped before rewriting the files)
        swapped = False
        if catalog.table_exists(rejects[1]) and not catalog.table_exists(rejects[0]):
            # Only the new version has rejects (lenient): its table becomes the entity's, by name
            # alone (nothing to keep), in the same transaction; left behind, the window's rejects
            # were hidden from 'lakepub rejects' and took the name a later window keeps.
            pairs.append((rejects[0], None, rejects[1], catalog.load_table(rejects[1]).metadata_location, None))
        for published, new, kept in names:
            try:
                old_table = catalog.load_table(published)
            except NoSuchTableError:  # a dataset (or entity) of the contract never published
                lagging.append(f"{'.'.join(published)} does not exist")
                continue
            try:
                new_table = catalog.load_table(new)
            except NoSuchTableError:
                lagging.append(f"{'.'.join(new)} does not exist")
                continue
            if published != names[0][0]:
                if (retired := retirement_of(old_table)) is not None:  # the swap would bring it back un-retired
                    lagging.append(f"{'.'.join(published)} is retired since {iso(retired.at_ms)} and the "
                                   f"{'.'.join(new)} table that would replace it is not: restore it first "
                                   f"('lakepub restore {published[-1]}'), promote, then retire it again")
                a, b = latest_record(old_table), latest_record(new_table)
                if b is None or a is None or a.positions != b.positions:
                    lagging.append(f"{'.'.join(new)} at {b.positions if b else '(nothing)'} vs "
                                   f"{'.'.join(published)} at {a.positions if a else '(nothing)'}")
            pairs.append((published, old_table.metadata_location, new, new_table.metadata_location, kept))
    return pairs, lagging, swapped


def _swapped_to(config: Any, contract: Any, catalog: Any) -> bool:
    """Whether a dataset names ``contract`` on an entity whose older major version a swap kept
    (a promotion that stopped after rewriting the dataset files: finish it)."""
    from lakepub.publish.dual import major
    from lakepub.store.layout import ledger_id

    entities = {spec.entity for spec in config.datasets.values() if spec.contract.schema_ref == contract.schema_ref}
    return any(catalog.table_exists(ledger_id(config.namespace, f"{entity}__v{m}"))
               for entity in entities for m in range(major(contract)))


def _advice(lagging: list[str]) -> str:
    behind = [item for item in lagging if " is retired since " not in item and "nothing to swap" not in item]
    return ": run 'lakepub run' on the datasets first" if behind else ""


def leave_conditions(config: Any, contract: Any) -> list[Condition]:
    """DUAL_WRITE -> DEFAULT: the new version's tables are at the published positions."""
    _, lagging, swapped = _pairs(config, contract, _catalog(config))
    if swapped:
        return [Condition("caught up", True, "the swap already landed; the dataset files are rewritten")]
    return [Condition("caught up", not lagging, "every new table records the published positions" if not lagging
                      else f"{'; '.join(lagging)}{_advice(lagging)}")]


def swap(config: Any, contract: Any) -> list[str]:
    """Swap the new version in (one catalog transaction), then rewrite the dataset files'
    ``contract:`` lines; returns the dataset files rewritten. BlockedError (exit 3) if a table
    moved since the conditions were checked: nothing was swapped, promote again."""
    from lakepub.store.commit import CommitConflict, exchange_tables

    catalog = _catalog(config)
    groups = _groups(config, contract)
    pairs, lagging, swapped = _pairs(config, contract, catalog)
    if lagging:
        raise BlockedError(f"{contract.schema_ref}: {'; '.join(lagging)}; nothing was swapped{_advice(lagging)}")
    if pairs:
        try:
            exchange_tables(catalog, pairs)
        except CommitConflict as exc:
            raise BlockedError(f"{contract.schema_ref}: a table moved during the swap ({exc}); nothing was swapped: "
                               "promote again") from exc
    return _rewrite_contract_lines(groups, contract)


def _rewrite_contract_lines(groups: list[Any], contract: Any) -> list[str]:
    paths = sorted({Path(spec.path) for g in groups for spec in g.datasets if spec.path is not None})
    olds = {g.contract.schema_ref for g in groups}
    line = re.compile(r"^(\s*contract:\s*)([\"']?)(" + "|".join(re.escape(r) for r in olds) + r")\2(\s*(#.*)?)$",
                      re.MULTILINE)
    # Every file written aside first, then each renamed over its original: a failure while writing
    # (disk full, a path in the way) leaves every file naming the old version. Datasets of one
    # entity must name one contract (config._check_entities): half the files rewritten would make
    # the workspace unloadable, and 'promote again' could not run to finish.
    staged: list[tuple[Path, Path]] = []
    stuck: list[str] = []
    try:
        for path in paths:
            text = path.read_text()
            new = line.sub(lambda m: f"{m.group(1)}{m.group(2)}{contract.schema_ref}{m.group(2)}{m.group(4)}", text)
            if _names_old(new, olds):  # a spelling the line pattern does not take (flow style, a quoted key)
                stuck.append(str(path))
            elif new != text:
                tmp = path.with_name(f".{path.name}.promote")
                tmp.write_text(new)
                staged.append((tmp, path))
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise BlockedError(f"{contract.schema_ref}: the tables were swapped, but the dataset files could not be "
                           f"rewritten ({exc}); no dataset file was changed: fix that and promote again, which "
                           "finishes the promotion") from exc
    if stuck:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise BlockedError(f"{contract.schema_ref}: the tables were swapped, but the 'contract:' of {', '.join(stuck)} "
                           f"could not be rewritten (write it as a plain line 'contract: {contract.schema_ref}'); no "
                           "dataset file was changed: edit them by hand, or set the line plainly and promote again")
    for tmp, path in staged:
        tmp.replace(path)
    return [str(p) for p in paths]


def _names_old(text: str, olds: set[str]) -> bool:
    import yaml

    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:  # pragma: no cover - the file was loaded as the configuration already
        return False
    return any(isinstance(d, dict) and d.get("contract") in olds for d in docs)
