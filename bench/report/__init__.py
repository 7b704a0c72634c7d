"""bench/REPORT.md: every headline figure as a row (workload, policy, figure, value, commit,
command), generated from the study records in bench/results/report/ by `python -m
bench.report` (records.py: the format; render.py: the text)."""
