#!/usr/bin/env bash
# One command on a fresh machine: set up, then run the main job (lakepub demo) on the embedded
# default (SQLite catalog + local warehouse) in a new folder. Extra arguments go to `lakepub demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir="${LAKEPUB_DEMO_DIR:-lakepub-demo-$(date +%Y%m%d-%H%M%S)}"
exec .venv/bin/lakepub demo --dir "$dir" "$@"
