"""`hourglass serve --workers 2`: real processes on PostgreSQL and MariaDB.

Which worker serves a connection is the kernel's choice; these tests find out from /proc
(the socket's inode, in the worker's open files) and send their requests on connections
they know the owner of, so each claim is about both processes: counters and histograms
add up across them, the queue-depth gauge is read once (not once per process), and
SIGTERM drains both. The parent's own accounting: a worker that dies stops the rest
(exit 1), and workers whose parent is gone stop by themselves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import truncate_all
from tests.support.helpers import wait_until
from tests.support.server import Server, free_port, running_server

pytestmark = pytest.mark.server_databases

TIMEOUT = 30
WAIT = 20  # a long poll's wait: far longer than a stop may take
PROMPTLY = 5  # seconds: a waiting poll answers within this of SIGTERM
MAX_ATTEMPTS = 200  # connections opened to find one served by each worker


class RawConnection:
    """One keep-alive HTTP/1.1 connection, written by hand: a request can stop halfway."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.reader = self.socket.makefile("rb")
        self.client_port = self.socket.getsockname()[1]

    def send_head(self, method: str, path: str, body_length: int | None = None) -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        if body_length is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {body_length}"]
        self.socket.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())

    def send(self, method: str, path: str, document: object = None) -> None:
        body = b"" if document is None else json.dumps(document).encode()
        self.send_head(method, path, None if document is None else len(body))
        self.socket.sendall(body)

    def response(self) -> tuple[int, bytes]:
        status = int(self.reader.readline().split()[1])
        length = 0
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, self.reader.read(length)

    def request(self, method: str, path: str, document: object = None) -> tuple[int, bytes]:
        self.send(method, path, document)
        return self.response()

    def close(self) -> None:
        self.reader.close()
        self.socket.close()


def _workers(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return sorted(int(child) for child in children)


def _serving(server_port: int, client_port: int, pids: list[int]) -> int | None:
    """The worker holding the server side of the connection from `client_port`, if any yet."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if (int(local.split(":")[1], 16), int(remote.split(":")[1], 16)) == (
            server_port,
            client_port,
        ):
            inode = fields[9]
    if inode in (None, "0"):
        return None  # not accepted yet
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except FileNotFoundError:
                continue
    return None


def _connections(server: Server, pids: list[int], each: int) -> dict[int, list[RawConnection]]:
    """`each` open connections served by every worker (the others opened on the way closed)."""
    owned: dict[int, list[RawConnection]] = {pid: [] for pid in pids}
    for _ in range(MAX_ATTEMPTS):
        if all(len(connections) >= each for connections in owned.values()):
            return owned
        connection = RawConnection(server.port)
        # Accepted once it answers; then its socket is in one worker's files.
        assert connection.request("GET", "/healthz")[0] == 200
        pid = _serving(server.port, connection.client_port, pids)
        assert pid is not None, "an answered connection that no worker holds"
        if len(owned[pid]) < each:
            owned[pid].append(connection)
        else:
            connection.close()
    counts = {pid: len(connections) for pid, connections in owned.items()}
    raise AssertionError(f"{MAX_ATTEMPTS} connections did not reach every worker: {counts}")


def _metrics_dir(server: Server) -> Path:
    for line in server.output:
        if "the workers' metrics: files in " in line:
            return Path(line.split("files in ")[1].split()[0])
    raise AssertionError("the parent did not say where the metrics are")


def _sample(text: str, name: str, **labels: str) -> list[float]:
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]


def _scrape(connection: RawConnection) -> str:
    status, body = connection.request("GET", "/metrics")
    assert status == 200
    return body.decode()


def _of_worker(directory: Path, pid: int, name: str, **labels: str) -> float:
    """What one worker's own files count for `name` (summed over the series `labels` match)."""
    files = [str(path) for path in directory.glob(f"*_{pid}.db")]
    return sum(
        sample.value
        for metric in MultiProcessCollector.merge(files)
        for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # ended, and its new parent has not reaped it


@pytest.fixture
def workers(server_url: str) -> Iterator[tuple[Server, list[int]]]:
    """`hourglass serve --workers 2` on empty tables, and its workers' pids."""
    truncate_all(server_url)
    with running_server(server_url, workers=2) as server:
        wait_until(lambda: len(_workers(server.pid)) == 2, TIMEOUT, "two workers")
        yield server, _workers(server.pid)


def test_counters_and_histograms_add_up_across_the_processes(workers):
    server, pids = workers
    directory = _metrics_dir(server)
    owned = _connections(server, pids, each=1)
    first, second = (owned[pid][0] for pid in pids)
    # Different numbers through each worker, so a sum is told apart from either alone.
    offers = {pids[0]: 7, pids[1]: 12}
    for pid, connection in ((pids[0], first), (pids[1], second)):
        for index in range(offers[pid]):
            status, _ = connection.request(
                "PUT", f"/v1/queues/spread/messages/{pid}-{index}", {"payload": index}
            )
            assert status == 201
    for pid in pids:
        assert _of_worker(directory, pid, "hourglass_messages_offered_total") == offers[pid]
    total = sum(offers.values())

    # Each delivered by whichever worker polls it: 3 by the first, the rest by the second.
    delivered = {pids[0]: 3, pids[1]: total - 3}
    for pid, connection in ((pids[0], first), (pids[1], second)):
        for _ in range(delivered[pid]):
            status, body = connection.request("POST", "/v1/queues/spread/poll", {"max": 1})
            assert status == 200 and len(json.loads(body)["messages"]) == 1

    for connection in (first, second):  # a scrape of either worker shows the sum
        text = _scrape(connection)
        assert _sample(text, "hourglass_messages_offered_total", queue="spread") == [total]
        assert _sample(
            text, "hourglass_messages_delivered_total", queue="spread", delivery="first"
        ) == [total]
        assert _sample(text, "hourglass_delivery_lateness_seconds_count", queue="spread") == [total]
        assert _sample(
            text, "hourglass_http_request_duration_seconds_count", method="PUT", status="201"
        ) == [total]
        assert _sample(
            text, "hourglass_http_request_duration_seconds_count", method="POST", status="200"
        ) == [total]
    for pid in pids:
        assert (
            _of_worker(directory, pid, "hourglass_delivery_lateness_seconds_count")
            == delivered[pid]
        )


def test_the_queue_depth_is_read_once_not_added_up(workers):
    server, pids = workers
    owned = _connections(server, pids, each=1)
    for index in range(5):
        status, _ = owned[pids[index % 2]][0].request(
            "PUT", f"/v1/queues/depth/messages/{index}", {"payload": index}
        )
        assert status == 201
    for pid in pids:  # each worker's scrape: 5 ready, once, not 5 per process
        text = _scrape(owned[pid][0])
        assert _sample(text, "hourglass_queue_messages", queue="depth", state="ready") == [5]
        assert _sample(text, "hourglass_queue_oldest_ready_age_seconds", queue="depth") != []
        assert _sample(text, "hourglass_build_info") == [1]
        # The tables' health likewise: read by the scraping worker, shown once.
        assert len(_sample(text, "hourglass_vacuum_held_back_seconds", kind="transaction")) == 1


def test_open_connections_add_up_across_the_processes(workers):
    server, pids = workers
    owned = _connections(server, pids, each=2)  # 2 idle connections held by each worker
    scraper = owned[pids[0]][0]
    # Each worker writes its count on its tick (0.1 s): 4 in all.
    wait_until(
        lambda: _sample(_scrape(scraper), "hourglass_connections_open") == [4],
        TIMEOUT,
        "four open connections counted",
    )


def test_sigterm_drains_both_processes(workers):
    server, pids = workers
    directory = _metrics_dir(server)
    owned = _connections(server, pids, each=3)
    polls = [owned[pid][0] for pid in pids]
    uploads = [owned[pid][1] for pid in pids]
    body = json.dumps({"payload": "in flight"}).encode()
    for connection in polls:
        connection.send("POST", "/v1/queues/drain/poll", {"wait": WAIT})
    for connection in uploads:  # a request in flight: its body half sent
        connection.send_head("PUT", "/v1/queues/drain/messages/late", len(body))
        connection.socket.sendall(body[:5])
    for pid in pids:
        # An answer on another connection of the same worker: its loop has read the
        # poll and the head sent before (they were in its sockets first).
        assert owned[pid][2].request("GET", "/healthz")[0] == 200

    stopped_at = time.monotonic()
    os.kill(server.pid, signal.SIGTERM)
    for connection in polls:
        status, answer = connection.response()
        assert (status, json.loads(answer)) == (200, {"lock_id": None, "messages": []})
        assert time.monotonic() - stopped_at < PROMPTLY
    for connection in uploads:
        connection.socket.sendall(body[5:])
        status, _ = connection.response()
        assert status in (200, 201)  # one offer created "late", the other found it
    assert server.process is not None
    assert server.process.wait(TIMEOUT) == 0
    assert all(_gone(pid) for pid in pids)
    assert not directory.exists()
    for pid in pids:
        assert any(f"worker {pid} stopped" in line for line in server.output)


def test_a_worker_that_dies_stops_the_others_and_the_parent_exits_1(workers):
    server, pids = workers
    directory = _metrics_dir(server)
    os.kill(pids[0], signal.SIGKILL)
    assert server.process is not None
    assert server.process.wait(TIMEOUT) == 1
    assert all(_gone(pid) for pid in pids)
    assert not directory.exists()
    assert any(f"worker {pids[0]} was killed by SIGKILL" in line for line in server.output)


def test_workers_whose_parent_is_gone_stop_by_themselves(workers):
    server, pids = workers
    directory = _metrics_dir(server)
    try:
        os.kill(server.pid, signal.SIGKILL)
        for pid in pids:
            wait_until(lambda pid=pid: _gone(pid), TIMEOUT, f"worker {pid} to stop")
    finally:
        # Only an orderly stop removes it; a killed parent leaves it behind.
        for file in directory.glob("*"):
            file.unlink()
        directory.rmdir()


def test_a_stop_while_the_workers_start_ends_them_all_with_0(server_url):
    """SIGTERM as soon as the first worker is forked: before the workers' servers handle
    signals (they keep it for their start), or after; either way all end, and so does
    the parent, with 0."""
    environment = {**os.environ, "HOURGLASS_DATABASE_URL": server_url}
    command = [sys.executable, "-m", "app", "serve", "--port", str(free_port()), "--workers", "2"]
    process = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    output = []
    for line in process.stderr:
        output.append(line)
        if "worker" in line and "started" in line:
            process.send_signal(signal.SIGTERM)
            break
    try:
        code = process.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        for pid in [*_workers(process.pid), process.pid]:
            os.kill(pid, signal.SIGKILL)
        code = process.wait()
    output.extend(process.stderr)  # the parent and its workers have ended
    if code != 0:  # a killed parent leaves its metrics directory: not in /tmp for good
        for line in output:
            if "the workers' metrics: files in " in line:
                shutil.rmtree(line.split("files in ")[1].split()[0], ignore_errors=True)
    assert code == 0, "".join(output)
    stopped = [line for line in output if re.search(r"worker \d+ stopped", line)]
    assert len(stopped) == 2, "".join(output)
