"""The steps of `bench/gpu_check.sh`: one module per step, each run as
`python -m bench.gpu_check.<module> --out DIR [args]` or `... --dry-run [args]`.

Each module defines `STEP` (a `bench.gpu_check.step.Step`); the shell script runs the real
steps under `timeout` and `bench.gpu_check.dry_run` resolves them all in one process.
"""
