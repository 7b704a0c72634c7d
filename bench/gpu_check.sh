#!/usr/bin/env bash
# The GPU check's entry point at the path the workplace's device guide names; the check itself
# (its steps, options and dry run) is bench/studies/gpu_check.sh.
exec bash "$(dirname "${BASH_SOURCE[0]}")/studies/gpu_check.sh" "$@"
