#!/usr/bin/env bash
# Benchmark an already running OpenAI-compatible server with NVIDIA aiperf.
#
#   bash bench/studies/openai_client_bench.sh URL OUTDIR [CONCURRENCY=8] [REQUESTS=64]
#   e.g. bash bench/studies/openai_client_bench.sh http://127.0.0.1:8000 /tmp/bench_c8 8 64
#
# Client: aiperf 0.13.0 (PyPI), in its own venv at $AIPERF_VENV (default
# .venv-aiperf in the repository root), kept out of the project's .venv. One-time install, done
# here automatically when missing (CPU only, no torch, ~1.2 GB):
#   python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0
#
# Command run (synthetic prompts: 200 input tokens, 32 output tokens, chat, streaming):
#   aiperf profile --model MODEL --tokenizer HuggingFaceTB/SmolLM2-135M-Instruct
#     --url URL --endpoint-type chat --streaming --isl 200 --isl-stddev 0 --osl 32
#     --osl-stddev 0 --use-legacy-max-tokens --extra-inputs ignore_eos:true
#     --concurrency C --request-count N --warmup-request-count C --random-seed 0
#     --wait-for-model-timeout 60 --wait-for-model-mode inference --wait-for-model-interval 1
#     --workers-max 1 --record-processors 1 --no-server-metrics --no-gpu-telemetry
#     --ui none --output-artifact-dir OUTDIR
#
# Offline: HF_HUB_OFFLINE=1. aiperf 0.13.0 in offline mode cannot load a tokenizer
# from a plain directory (it always calls snapshot_download(repo_id)), so we
# fake a one-snapshot HF cache (symlinks to the local SmolLM2 tokenizer files)
# in a temp HF_HUB_CACHE and name the tokenizer by its repo id. Nothing is downloaded.
#
# Results: OUTDIR/profile_export_aiperf.json (+ .csv, per-request profile_export.jsonl);
# bench/studies/openai_client_summary.py prints the one-line summary from it.
# Overrides (env): MODEL (default: first id from URL/v1/models), ISL, OSL, ENDPOINT_TYPE (chat|completions), TOKENIZER_DIR,
# AIPERF_VENV, AIPERF_EXTRA_ARGS (extra aiperf flags, e.g. --use-server-token-count).
set -euo pipefail

URL=${1:?usage: $0 URL OUTDIR [CONCURRENCY] [REQUESTS]}
OUTDIR=${2:?usage: $0 URL OUTDIR [CONCURRENCY] [REQUESTS]}
CONC=${3:-8}
REQS=${4:-64}
AIPERF_VERSION=0.13.0
AIPERF_VENV=${AIPERF_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-aiperf}
ISL=${ISL:-200}
OSL=${OSL:-32}
ENDPOINT_TYPE=${ENDPOINT_TYPE:-chat}
REPO=$(cd "$(dirname "$0")/../.." && pwd)

# One-time install of the client into its own venv.
if ! "$AIPERF_VENV/bin/aiperf" --version 2>/dev/null | grep -qx "$AIPERF_VERSION"; then
  echo "installing aiperf==$AIPERF_VERSION into $AIPERF_VENV" >&2
  python3 -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/pip" install -q "aiperf==$AIPERF_VERSION" > "$AIPERF_VENV/install.log" 2>&1 \
    || { tail -n 20 "$AIPERF_VENV/install.log" >&2; exit 1; }
fi

# Local tokenizer dir -> fake HF cache entry (see header).
if [ -z "${TOKENIZER_DIR:-}" ]; then
  TOKENIZER_DIR=$(cd "$REPO" && .venv/bin/python -c \
    "from engine.models.smollm2 import ensure_smollm2_dir; print(ensure_smollm2_dir())" | tail -n1)
fi
TMP=$(mktemp -d)   # fake HF cache + aiperf's mmap dataset files; removed on exit
trap 'rm -rf "$TMP"' EXIT
TOK_REPO=HuggingFaceTB/SmolLM2-135M-Instruct
REV=0000000000000000000000000000000000000000
ENTRY="$TMP/hf/models--HuggingFaceTB--SmolLM2-135M-Instruct"
mkdir -p "$ENTRY/refs" "$ENTRY/snapshots/$REV"
printf %s "$REV" > "$ENTRY/refs/main"
for f in "$TOKENIZER_DIR"/*.json "$TOKENIZER_DIR"/*.jinja; do
  if [ -e "$f" ]; then ln -s "$f" "$ENTRY/snapshots/$REV/"; fi
done

# Model name: $MODEL, else the first id the server lists at /v1/models, else SmolLM2-135M-Instruct.
if [ -z "${MODEL:-}" ]; then
  MODEL=$(python3 -c 'import json,sys,urllib.request as u
try: print(json.load(u.urlopen(sys.argv[1].rstrip("/")+"/v1/models",timeout=5))["data"][0]["id"])
except Exception: pass' "$URL")
  MODEL=${MODEL:-SmolLM2-135M-Instruct}
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_CACHE="$TMP/hf" \
  AIPERF_DATASET_MMAP_BASE_PATH="$TMP"
mkdir -p "$OUTDIR"
start=$(date +%s)
# shellcheck disable=SC2086
if ! "$AIPERF_VENV/bin/aiperf" profile \
    --model "$MODEL" --tokenizer "$TOK_REPO" \
    --url "$URL" --endpoint-type "$ENDPOINT_TYPE" --streaming \
    --isl "$ISL" --isl-stddev 0 --osl "$OSL" --osl-stddev 0 \
    --use-legacy-max-tokens --extra-inputs ignore_eos:true \
    --concurrency "$CONC" --request-count "$REQS" --warmup-request-count "$CONC" \
    --random-seed 0 \
    --wait-for-model-timeout 60 --wait-for-model-mode inference --wait-for-model-interval 1 \
    --workers-max 1 --record-processors 1 --no-server-metrics --no-gpu-telemetry \
    --ui none --output-artifact-dir "$OUTDIR" ${AIPERF_EXTRA_ARGS:-} \
    > "$OUTDIR/aiperf_stdout.log" 2>&1; then
  tail -n 40 "$OUTDIR/aiperf_stdout.log" >&2
  echo "aiperf failed; full log: $OUTDIR/aiperf_stdout.log" >&2
  exit 1
fi
echo "aiperf ($MODEL @ $URL) took $(( $(date +%s) - start )) s; artifacts in $OUTDIR" >&2
python3 "$REPO/bench/studies/openai_client_summary.py" "$OUTDIR"
