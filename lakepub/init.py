"""``lakepub init``: write the embedded-default workspace into a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from lakepub.config import CONFIG_FILE
from lakepub.errors import ConfigError

TEMPLATES = Path(__file__).parent / "templates"


def init_workspace(folder: Path, *, force: bool = False) -> list[Path]:
    """Create lakepub.yaml, catalog/ (orders_daily + its contract) and landing/; return what was written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # the path, or a folder on it, is a file
        raise ConfigError(f"cannot create the workspace folder {folder}: {exc.strerror} ({exc.filename}); "
                          "give a folder path that is not a file or below one") from None
    config = folder / CONFIG_FILE
    if config.exists() and not force:
        raise ConfigError(f"{config} already exists (use --force to overwrite the template files)")
    written = []
    for src in sorted(TEMPLATES.rglob("*.yaml")):
        dest = folder / src.relative_to(TEMPLATES)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        written.append(dest)
    (folder / "landing" / "orders").mkdir(parents=True, exist_ok=True)  # the template dataset's source
    return written
