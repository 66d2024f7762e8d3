"""Benchmarks of karpy, runnable as modules (``python -m benchmarks.scheduling``).

They live outside ``src`` and ``tests`` on purpose: they are neither part of
the installed package nor a pass/fail check. A unit test cannot say anything
reliable about speed on a shared machine, and an autoscaler's cost quality
is a figure to watch, not a boolean. What they share with the tests is the
discipline: deterministic inputs (seeded generators), the public API only,
and a smoke test (``tests/benchmarks``) so that they keep running as the
code they measure changes. See ``benchmarks/README.md``.
"""
