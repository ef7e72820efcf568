"""Benchmarks of the simulated workcell (not tests: they report figures, they never fail CI).

``python -m bench.run`` (or ``bench/run.sh``) prints a table of figures next to
their targets and writes ``bench-output/bench.json``. See :mod:`bench.run`.
"""
