"""What one big poll costs a real `hourglass serve` process in memory, against its answer.

The messages are written straight into the database, so the server's heap has
not grown on their way in. A few polls first run every code path of a poll once
(an empty one, a small one, and one streamed with a payload read after the
claim); then the kernel's peak-RSS mark is reset (/proc/<pid>/clear_refs) and
one poll of up to 1000 messages of the largest payload is made: the peak's
growth over the resident size at the reset is what that poll cost.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.config import Settings
from app.domain.messages import IfExists, Offer
from app.storage.blocking import create_blocking_storage
from tests.support.server import running_server

PAYLOAD_BYTES = 262_144  # HOURGLASS_MAX_PAYLOAD_BYTES's default
MESSAGES = 100  # 25 MiB due, past the default bound of a poll's answer
MAX_POLL_BYTES = 16 * 1024 * 1024  # HOURGLASS_MAX_POLL_BYTES's default


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024  # kB
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _json_string(length: int, letter: bytes) -> bytes:
    return b'"' + letter * (length - 2) + b'"'


def _store_messages(settings: Settings) -> None:
    store = create_blocking_storage(settings)
    try:
        due = round(time.time() * 1000) - 60_000

        def offer(queue: str, count: int, payload: bytes) -> None:
            for start in range(0, count, 10):
                offers = [
                    Offer(f"{queue}-{index:03d}", payload, due, IfExists.UPDATE)
                    for index in range(start, min(start + 10, count))
                ]
                store.messages.offer_many(queue, offers, due)

        offer("big", MESSAGES, _json_string(PAYLOAD_BYTES, b"x"))
        offer("small", 1, b"1")
        offer("warm", 2, _json_string(150_000, b"w"))  # the second one is read after the claim
    finally:
        store.close()


def test_one_big_poll_costs_the_server_less_than_its_answer_and_a_fifth(clean_database):
    _store_messages(clean_database.settings())
    with (
        running_server(clean_database.url) as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
    ):
        for queue in ("empty", "small", "warm"):
            assert http.post(f"/v1/queues/{queue}/poll", json={"max": 1000}).status_code == 200
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # peak RSS := RSS now
        resident = _status_bytes(server.pid, "VmRSS")
        response = http.post("/v1/queues/big/poll", json={"max": 1000})
        peak = _status_bytes(server.pid, "VmHWM")
    assert response.status_code == 200
    answer = len(response.content)
    growth = peak - resident
    print(
        f"\n{clean_database.name}: {len(response.json()['messages'])} messages, answer "
        f"{answer / 2**20:.1f} MiB, server peak RSS +{growth / 2**20:.1f} MiB "
        f"({growth / answer:.2f}x)"
    )
    assert MAX_POLL_BYTES - PAYLOAD_BYTES < answer <= MAX_POLL_BYTES
    assert growth < 1.2 * answer
