#!/usr/bin/env bash
# The main job: set up, then serve SmolLM2-135M-Instruct over gRPC (the engine's default
# configuration, EngineConfig's) and run three agent programs against it (a ReAct loop with a
# calculator tool, a fan-out/join, a chat).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/agentix demo "$@"
