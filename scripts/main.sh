#!/usr/bin/env bash
# The main job: set up, then serve a few chat prompts on SmolLM2-135M-Instruct.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/agentix generate "$@"
