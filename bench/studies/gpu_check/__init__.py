"""The steps of `bench/studies/gpu_check.sh`: one module per step, each run as
`python -m bench.studies.gpu_check.<module> --out DIR [args]` or `... --dry-run [args]`.

Each module defines `STEP` (a `bench.studies.gpu_check.step.Step`); the shell script runs the real
steps under `timeout` and `bench.studies.gpu_check.dry_run` resolves them all in one process.
"""
