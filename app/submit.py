"""The pipeline's jobs as a file for `spark-submit`: `spark-submit [options] submit.py import …`.

spark-submit runs a Python file, not a command; this one runs `hourglass pipeline`
with the arguments after it. Its path, wherever the package is installed:
`python -c 'import app.submit as m; print(m.__file__)'`.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    # Python put this file's folder first on sys.path: its modules (config, logs, …)
    # must not be importable as top-level modules that shadow others.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    from app.__main__ import main as hourglass

    hourglass(["pipeline", *sys.argv[1:]])


if __name__ == "__main__":
    main()
