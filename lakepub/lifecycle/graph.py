"""Which datasets read which: the dataset graph as the lifecycle needs it (downstream closure).

A derived dataset lists the datasets it reads under ``projection.inputs`` (issue 14's format: a
mapping ``{input dataset: which rows an output partition reads}``); its keys are the edges. Base
datasets (aggregate, current) have no inputs. This module reads the YAML files of
``catalog/datasets/`` as plain mappings, not through ``lakepub.config``: it must see every file
that names an input, also a definition this build cannot load (a derived kind from a newer
lakepub), since the janitor deletes the definitions downstream of a dataset it hard-deletes.
It is deliberately small so that it can later be pointed at the derived datasets' own graph
loader. A file that is not a YAML mapping is skipped (``lakepub.config`` reports it).

Invariant: ``downstream_of(names)`` is the smallest set holding ``names`` and every dataset with
an input in the set (transitively; cycles terminate). Cost: one YAML parse per dataset file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml


@dataclass(frozen=True)
class Definition:
    name: str
    path: Path
    inputs: tuple[str, ...]


def definitions(catalog_dir: Path) -> dict[str, Definition]:
    """{dataset name: its file and inputs} of every dataset file in ``catalog_dir/datasets``."""
    folder = Path(catalog_dir) / "datasets"
    out: dict[str, Definition] = {}
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(raw, dict):
            continue
        name = raw.get("name") if isinstance(raw.get("name"), str) else path.stem
        projection = raw.get("projection")
        inputs = projection.get("inputs") if isinstance(projection, dict) else None
        edges = tuple(str(k) for k in inputs) if isinstance(inputs, dict) else ()
        out.setdefault(name, Definition(name, path, edges))
    return out


def downstream_of(catalog_dir: Path, names: Iterable[str],
                  known: dict[str, Definition] | None = None) -> set[str]:
    """``names`` and every dataset that reads one of them, directly or not."""
    defs = definitions(catalog_dir) if known is None else known
    readers: dict[str, list[str]] = {}
    for d in defs.values():
        for source in d.inputs:
            readers.setdefault(source, []).append(d.name)
    found = set(names)
    todo = list(found)
    while todo:
        for reader in readers.get(todo.pop(), ()):
            if reader not in found:
                found.add(reader)
                todo.append(reader)
    return found
