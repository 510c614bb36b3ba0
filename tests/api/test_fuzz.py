"""schemathesis against a running `hourglass serve` and its own openapi.yaml: no 5xx, and every
answer (status, content type, body) matches the document. Bounded, with a fixed seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scratch_database
from tests.server import running_server

ROOT = Path(__file__).resolve().parents[2]
# One worker: hypothesis parses lambdas with ast.parse, which on Python 3.11 can fail
# ("AST constructor recursion depth mismatch") when two threads do it at once.
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"

pytestmark = pytest.mark.postgresql_only


def test_schemathesis_finds_no_server_error_and_no_answer_off_the_schema(tmp_path):
    with scratch_database("postgresql", "fuzz") as url, running_server(url) as server:
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                str(ROOT / "openapi.yaml"),
                "--url",
                server.url,
                "--checks",
                CHECKS,
                "--max-examples",
                "25",
                "--workers",
                "1",
                "--seed",
                "20261126",
            ],
            check=False,
            cwd=tmp_path,  # schemathesis keeps a cache in its working directory
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert finished.returncode == 0, finished.stdout[-6000:] + finished.stderr[-2000:]
