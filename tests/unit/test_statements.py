"""Statement shapes that must hold on every database, checked without one."""

from __future__ import annotations

from sqlalchemy.dialects import mysql

from app.storage import claims
from app.storage.statements import leases


def test_the_limited_poll_sets_deliveries_last():
    # MariaDB evaluates SET clauses left to right: the CASEs that read "deliveries"
    # must come before it is set, or the delivery that reaches the limit is lost.
    compiled = str(leases.claim_update_limited.compile(dialect=mysql.dialect()))
    set_clauses = compiled.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert set_clauses.rsplit(", ", 1)[1].startswith("deliveries=")
    assert set_clauses.count("delayed_queue.deliveries <") == 5


def test_a_poll_takes_rows_while_their_answer_fits_and_the_first_always():
    assert claims.answer_length([], 10) == 0
    assert claims.answer_length([5, 5, 5], 10) == 2  # the third would pass the bound
    assert claims.answer_length([20, 1], 10) == 1  # larger than the bound, alone
    assert claims.answer_length([0, 0, 20, 1], 10) == 3  # rows to dead-letter count nothing
    assert claims.answer_length([5, 0, 5, 0, 1], 10) == 4
