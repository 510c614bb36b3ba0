"""The connection cap keeps back the open files the process needs besides its clients."""

from __future__ import annotations

import pytest

from app.server import fit_to_open_files


@pytest.mark.parametrize(
    ("open_files", "pool_size", "cap"),
    [
        (1024, 10, 922),  # a tenth of the limit kept back
        (1024, 100, 660),  # 64 and three files for each pooled connection (SQLite's)
        (256, 10, 162),
        (1_048_576, 10, 10_000),  # the configured cap
    ],
)
def test_the_cap_leaves_the_pool_and_the_process_their_files(open_files, pool_size, cap):
    assert fit_to_open_files(10_000, open_files, pool_size) == cap
