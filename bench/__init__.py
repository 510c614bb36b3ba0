"""Hourglass's benchmarks. Run them as modules from the repository root, e.g.
`python -m bench.run --quick`: the repository root is then on the import path, so
they import `app`, `tests.support.server` and each other without editing `sys.path`."""
