"""The service's Prometheus collectors: each one's name, help and labels, made on a registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.metrics.labels import OTHER_QUEUES

# Seconds from due to first delivery: from on time to an outage's worth late.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
# Seconds a push request takes: from a local endpoint to the longest timeout (300 s).
PUSH_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# The kinds of hourglass_errors_total, each series made at 0 on start: increase()
# reads nothing in a series whose first sample is already 1, so without them the
# first failure of a kind would never reach an alert (deploy/prometheus/alerts.yml).
ERROR_KINDS = (
    "database_unavailable",
    "cron_pass",
    "cron_entry",
    "history_prune",
    "expiry_sweep",
    "group_keeper",
    "metrics_queue_gauges",
    "metrics_table_health",
    "push_refresh",
    "push_claim",
    "push_settle",
)


class QueueCollectors:
    """The collectors labelled by queue (their first label), whose series the cap on queue
    labels makes and removes (app/metrics/labels.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cron_runs_installed = Counter(
            "hourglass_cron_runs_installed",
            "Cron runs installed as messages (each run once, whichever replica installs it)",
            ["queue", "name"],
            registry=registry,
        )
        self.offered = Counter(
            "hourglass_messages_offered",
            "Offers, by outcome",
            ["queue", "outcome"],
            registry=registry,
        )
        self.delivered = Counter(
            "hourglass_messages_delivered",
            "Messages handed to workers, first or redelivery",
            ["queue", "delivery"],
            registry=registry,
        )
        self.acknowledged = Counter(
            "hourglass_messages_acknowledged",
            "Messages deleted by acknowledgement",
            ["queue"],
            registry=registry,
        )
        self.released = Counter(
            "hourglass_messages_released",
            "Messages given back without acknowledgement (whole locks and per key)",
            ["queue"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "hourglass_messages_dead_lettered",
            "Messages moved to their dead-letter queue after their last allowed delivery",
            ["queue"],
            registry=registry,
        )
        self.expired = Counter(
            "hourglass_messages_expired",
            "Messages whose expiry passed: moved to their dead-letter queue, or removed",
            ["queue"],
            registry=registry,
        )
        self.polls = Counter(
            "hourglass_polls",
            f"Polls answered, with messages or empty (queue {OTHER_QUEUES!r}: empty polls of "
            "queues that hold nothing)",
            ["queue", "result"],
            registry=registry,
        )
        self.held_back = Counter(
            "hourglass_polls_held_back",
            "Polls (and push claims) that took less than they asked for, possibly nothing, "
            "because a queue limit left no more room: max_leased or rate (counted once per "
            "poll, however long it waited)",
            ["queue", "limit"],
            registry=registry,
        )
        self.lateness = Histogram(
            "hourglass_delivery_lateness_seconds",
            "First delivery minus the time it was due",
            ["queue"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.push_requests = Counter(
            "hourglass_push_requests",
            "Push requests by result: the answer's status class (2xx, 3xx, 4xx, 5xx), "
            "timeout, or error (no answer: connection refused or reset, and the like)",
            ["queue", "result"],
            registry=registry,
        )
        self.push_duration = Histogram(
            "hourglass_push_duration_seconds",
            "Push requests, from their start to their answer or failure",
            ["queue"],
            buckets=PUSH_DURATION_BUCKETS,
            registry=registry,
        )


class ServiceCollectors:
    """The collectors of the process as a whole: statements, failures by kind, requests,
    client connections, and the link to the other processes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.database_statements = Counter(
            "hourglass_database_statements",
            "Statements sent to the database (what an idle service costs the database, too)",
            registry=registry,
        )
        self.errors = Counter(
            "hourglass_errors",
            "Failures by kind: database_unavailable (a request answered 503), cron_pass, "
            "cron_entry, history_prune, expiry_sweep, group_keeper, metrics_queue_gauges, "
            "metrics_table_health, "
            "push_refresh, push_claim, push_settle",
            ["kind"],
            registry=registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)
        self.http_duration = Histogram(
            "hourglass_http_request_duration_seconds",
            "Requests by route template",
            ["method", "route", "status"],
            registry=registry,
        )
        self.connections_dropped = Counter(
            "hourglass_connections_dropped",
            "Client connections the service closed: head_timeout (no request head in time), "
            "body_timeout (no whole body in time: answered 408), evicted (waiting for a head, "
            "at the total cap, for a newer one), client_cap and server_cap (refused on arrival)",
            ["reason"],
            registry=registry,
        )
        self.connections_open = Gauge(
            "hourglass_connections_open",
            "Client connections open",
            registry=registry,
            # Several processes: each writes its own count, the dead ones' go (mark_process_dead).
            multiprocess_mode="livesum",
        )
        self.listener_connected = Gauge(
            "hourglass_listener_connected",
            "1 while this process listens for other processes' notifications (PostgreSQL: "
            "LISTEN); 0 while its long polls rely on re-checks alone (with several "
            "processes: 0 if any of them does not listen)",
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.listener_reconnects = Counter(
            "hourglass_listener_reconnects",
            "Times the listener connected again after losing its connection",
            registry=registry,
        )
        self.peers_told = Counter(
            "hourglass_peer_notifications",
            "Queue names sent to the other processes (several offers to one queue while a "
            "notification is on its way go out as one)",
            registry=registry,
        )
