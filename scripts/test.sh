#!/usr/bin/env bash
# The whole test suite (fast and slow tests) on a fresh machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
