"""``lakepub catalog-config``: the workspace's pyiceberg catalog configuration, resolved.

``lakepub.yaml``'s ``catalog:`` mapping may name a SQLite file and a warehouse folder relative to
the workspace, and ``${VAR}`` references; lakepub resolves them when it opens the catalog
(``config.py``). This prints that resolved mapping (``name`` plus every property: ``type``,
``uri``, ``warehouse``, ``s3.*``, ...) with every relative path made absolute, so that::

    config = json.loads(subprocess.check_output(["lakepub", "-w", WS, "catalog-config", "--format", "json"]))
    catalog = pyiceberg.catalog.load_catalog(config.pop("name"), **config)

works from any folder, for any tool that takes pyiceberg catalog properties.

Invariant: the printed mapping is exactly what lakepub passes to ``load_catalog``, except that
secrets are replaced by ``***`` unless asked for (``show_secrets``): properties whose name holds
``secret``, ``password``, ``token``, ``credential`` or ``session`` and the password of a database
URI. Cost: none beyond reading ``lakepub.yaml``.
"""

from __future__ import annotations

import re
from typing import Mapping

REDACTED = "***"
_SECRET = re.compile(r"secret|password|token|credential|session", re.IGNORECASE)


def resolved(config, *, show_secrets: bool = False) -> tuple[dict[str, str], list[str]]:
    """The ``load_catalog`` configuration of a ``WorkspaceConfig`` (``name`` first) and the keys
    whose value was redacted (none with ``show_secrets``)."""
    out = {"name": config.catalog_name, **config.catalog_properties()}
    return (out, []) if show_secrets else redact(out)


def redact(properties: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    out, hidden = {}, []
    for key, value in properties.items():
        if _SECRET.search(key):
            out[key], changed = REDACTED, True
        elif key == "uri" and "://" in value:
            out[key] = _without_password(value)
            changed = out[key] != value
        else:
            out[key], changed = value, False
        if changed:
            hidden.append(key)
    return out, hidden


def _without_password(uri: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:  # not a database URI (a REST endpoint): user:password@ is still a secret
        return re.sub(r"//([^/:@]+):[^/@]*@", rf"//\1:{REDACTED}@", uri)
    if not url.password:
        return uri
    return url.render_as_string(hide_password=True)  # the password as ***
