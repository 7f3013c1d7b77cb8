"""Data contracts: the entity an event stream describes, its typed fields and their roles, and the
change protocol around them (lint, compatibility check, consumers, export: ``contract/cli.py``).

The names below are imported on first use, so importing a submodule (``lakepub.contract.cli``
for ``lakepub --help``) does not load pyarrow and pyiceberg.
"""

from typing import Any

__all__ = ["Contract", "Entity", "FieldSpec", "FieldType", "load_contracts"]


def __getattr__(name: str) -> Any:
    if name == "FieldType":
        from lakepub.contract.types import FieldType

        return FieldType
    if name in __all__:
        from lakepub.contract import model

        return getattr(model, name)
    raise AttributeError(name)
