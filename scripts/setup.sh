#!/usr/bin/env bash
# Create .venv and install lakepub with its pinned dependencies (duckdb + extensions, pyiceberg).
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: lakepub needs Python >= 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
log=.venv/setup.log
if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip \
       && .venv/bin/python -m pip install --disable-pip-version-check -e ".[test]"; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "error: installing lakepub into .venv failed (full log: $log)" >&2
  exit 1
fi
# An editable install leaves lakepub's modules uncompiled; compile them as a regular pip install
# does, so that no process pays ~0.1 s of CPU compiling them (nor fails to cache the result where
# PYTHONDONTWRITEBYTECODE is set, as in this project's shells).
.venv/bin/python -m compileall -q lakepub >>"$log" 2>&1 || true
.venv/bin/python -c 'import lakepub, duckdb; from lakepub.duck import extension_path; [extension_path(n) for n in ("avro", "iceberg", "httpfs")]' \
  || { echo "error: lakepub did not install correctly" >&2; exit 1; }
echo "lakepub $(.venv/bin/python -c 'import lakepub; print(lakepub.__version__)') is installed in .venv (log: .venv/setup.log)" >&2
