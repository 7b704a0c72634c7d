#!/usr/bin/env bash
# The GPU check: every step that needs a real GPU, in one time-bounded run that installs nothing.
#
#   bash bench/studies/gpu_check.sh [OUT_DIR]
#       default $OUT; writes OUT_DIR/gpu_check.md (the table, then each step's report and the log
#       tail of failures) and OUT_DIR/STEP/{log.txt,summary,result.json,report.md}
#   bash bench/studies/gpu_check.sh --dry-run
#       resolve every step without a GPU: "ok STEP: ..." or "FAIL STEP: why" per step
#
# Exit status: 0 when every step is ok or n/a, 1 otherwise (2: usage). Each step runs under
# `timeout` and the whole run within GPU_CHECK_BUDGET_S seconds (default 450); a failed step
# never stops the next. PYTHON picks the interpreter (default python3); the repository root is
# put on PYTHONPATH. GPU_CHECK_STEPS replaces the step list: lines of
# `NAME TIMEOUT_S MODULE [ARGS...]` (whitespace-split, no quoting), see bench/studies/gpu_check/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
BUDGET_S=${GPU_CHECK_BUDGET_S:-450}
DEFAULT_STEPS='env 15 bench.studies.gpu_check.environment
kernels 100 bench.studies.gpu_check.kernel_tests
parity-tiny 45 bench.studies.gpu_check.parity --model tiny
parity-smollm2 75 bench.studies.gpu_check.parity --model smollm2
decode-bandwidth 35 bench.studies.gpu_check.decode_bandwidth
swap 45 bench.studies.gpu_check.swap
throughput 150 bench.studies.gpu_check.throughput
tensor-parallel 40 bench.studies.gpu_check.tensor_parallel'
STEPS=${GPU_CHECK_STEPS:-$DEFAULT_STEPS}

dry_run() {
    command -v timeout >/dev/null || { echo "FAIL setup: no 'timeout' command"; return 1; }
    command -v "$PYTHON" >/dev/null || { echo "FAIL setup: python '$PYTHON' not found"; return 1; }
    echo "ok setup: $(command -v "$PYTHON"), timeout"
    timeout 120 "$PYTHON" -m bench.studies.gpu_check.dry_run <<<"$STEPS"
}

# run_step OUT NAME LIMIT MODULE [ARGS...]: one step under timeout; appends its table row to
# ROWS and its section to SECTIONS; returns 1 when it did not end ok or n/a.
run_step() {
    local out=$1 name=$2 limit=$3 module=$4 dir="$1/$2" rc=0 status="" summary="" section=""
    shift 4
    local start=$SECONDS left=$((BUDGET_S - SECONDS))
    ((limit < left)) || limit=$left
    mkdir -p "$dir"
    if ((left < 5)); then
        status="FAIL" summary="not run: the ${BUDGET_S}s budget is spent"
    else
        timeout -k 5 "$limit" "$PYTHON" -m "$module" --out "$dir" "$@" </dev/null \
            >"$dir/log.txt" 2>&1 || rc=$?
        if ((rc == 124 || rc == 137)); then
            status="TIMEOUT" summary="killed after ${limit}s"
        elif [[ -f $dir/summary ]]; then
            { read -r status; read -r summary; } <"$dir/summary"
            ((rc == 0)) || status="FAIL"
        else
            status="FAIL" summary="exit $rc: $(grep -v '^[[:space:]]*$' "$dir/log.txt" | tail -n 1)"
        fi
    fi
    echo "$status $name ($((SECONDS - start))s): $summary"
    ROWS+="| $name | $status | $((SECONDS - start)) | ${summary//|/\\|} |"$'\n'
    [[ -s $dir/report.md ]] && section+="$(cat "$dir/report.md")"$'\n\n'
    [[ $status == ok || $status == n/a ]] && rc=0 || rc=1
    if ((rc)) && [[ -s $dir/log.txt ]]; then
        section+="Log tail ($dir/log.txt):"$'\n\n```\n'"$(tail -n 25 "$dir/log.txt")"$'\n```\n\n'
    fi
    [[ -z $section ]] || SECTIONS+=$'\n'"## $name"$'\n\n'"${section%$'\n'}"
    return "$rc"
}

# run_all OUT: every step in order; OUT/gpu_check.md is rewritten after each one.
run_all() {
    local out=$1 failed=0 name limit module args title
    title="# GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit"
    title+=" $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    mkdir -p "$out"
    ROWS="" SECTIONS=""
    while read -r name limit module args; do
        [[ -z $name || $name == \#* ]] && continue
        # shellcheck disable=SC2086  # ARGS are whitespace-split by design
        run_step "$out" "$name" "$limit" "$module" $args || failed=1
        printf '%s\n\n| step | status | seconds | summary |\n| --- | --- | --- | --- |\n%s%s' \
            "$title" "$ROWS" "$SECTIONS" >"$out/gpu_check.md"
    done <<<"$STEPS"
    return "$failed"
}

case ${1:-} in
    --dry-run) dry_run ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" ;;
    -*) echo "error: unknown option $1 (try --help)" >&2; exit 2 ;;
    *)
        out=${1:-${OUT:-}}
        if [[ -z $out ]]; then
            echo "error: no output folder: pass one as the first argument or set \$OUT" >&2
            exit 2
        fi
        unset TRITON_INTERPRET  # kernels compiled for real
        rc=0
        run_all "$out" || rc=$?
        cat "$out/gpu_check.md"
        exit "$rc"
        ;;
esac
