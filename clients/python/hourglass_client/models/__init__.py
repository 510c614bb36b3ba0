"""What the API answers, as frozen dataclasses; times as aware UTC datetimes, durations in seconds.

By room: `messages` (offers, stored messages, batches, history, pages), `leases` (what
polls hand out and what settling a lock did), `queues` (stats, settings, redrives),
`cron` (recurring schedules), `times` (how times and durations are written).
"""

from hourglass_client.models.cron import CronEntry, CronInstallResult, InstallOutcome
from hourglass_client.models.leases import (
    Ack,
    AckResult,
    DeliveredMessage,
    DeliveryKind,
    Lease,
    ReleaseResult,
)
from hourglass_client.models.messages import (
    BatchOutcome,
    BatchResult,
    Finish,
    HistoryEntry,
    IfExists,
    ListState,
    Message,
    Offer,
    OfferResult,
    Outcome,
    Page,
    State,
    Trace,
)
from hourglass_client.models.queues import (
    PushTarget,
    QueueSettings,
    QueueStats,
    Rate,
    RedriveResult,
    RetryPolicy,
)
from hourglass_client.models.times import Seconds

__all__ = [
    "Ack",
    "AckResult",
    "BatchOutcome",
    "BatchResult",
    "CronEntry",
    "CronInstallResult",
    "DeliveredMessage",
    "DeliveryKind",
    "Finish",
    "HistoryEntry",
    "IfExists",
    "InstallOutcome",
    "Lease",
    "ListState",
    "Message",
    "Offer",
    "OfferResult",
    "Outcome",
    "Page",
    "PushTarget",
    "QueueSettings",
    "QueueStats",
    "Rate",
    "RedriveResult",
    "ReleaseResult",
    "RetryPolicy",
    "Seconds",
    "State",
    "Trace",
]
