#!/usr/bin/env bash
# One command on a fresh machine: set up, then run the whole test suite, integration tests
# included (PostgreSQL at 127.0.0.1:5432; S3 and Glue on a moto server the tests start).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  # The machine normally starts PostgreSQL; start it if it is installed but down.
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  # The report test renders `lakepub report` in headless Chromium (Debian's package); without
  # it that one test is skipped, saying why.
  echo "installing chromium for the report rendering test (apt-get, ~1 min)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "warning: could not install chromium; tests/test_report.py's rendering test will be skipped" >&2
fi
exec .venv/bin/python -m pytest -q -m "not slow" "$@"
