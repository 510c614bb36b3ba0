"""schemathesis against a running `hourglass serve`, as a new user would run it: its live
/openapi.json (equal to openapi.yaml: test_openapi), every check (`--checks all`). No 5xx,
every answer matches the document, every request the document allows is taken and every
one it forbids refused (but for the few rules no OpenAPI document can state: fuzz_hooks.py),
every 405 names its methods. Bounded, with a fixed seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scratch_database
from tests.support.server import running_server

ROOT = Path(__file__).resolve().parents[2]
SEED = "20261126"

pytestmark = pytest.mark.postgresql_only


def test_schemathesis_finds_nothing_the_schema_does_not_say(tmp_path):
    with scratch_database("postgresql", "fuzz") as url, running_server(url) as server:
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "25",
                # One worker: hypothesis parses lambdas with ast.parse, which on Python
                # 3.11 can fail ("AST constructor recursion depth mismatch") when two
                # threads do it at once.
                "--workers",
                "1",
                "--seed",
                SEED,
                # --checks all holds every answer to 10 s; a loaded machine is no failure
                # of the contract (a long poll's wait is kept short: fuzz_hooks.py).
                "--max-response-time",
                "30",
                "--request-timeout",
                "30",
            ],
            check=False,
            cwd=tmp_path,  # schemathesis keeps a cache in its working directory
            env={
                **os.environ,
                "SCHEMATHESIS_HOOKS": "tests.api.fuzz_hooks",
                "PYTHONPATH": str(ROOT),
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert finished.returncode == 0, finished.stdout[-8000:] + finished.stderr[-2000:]
