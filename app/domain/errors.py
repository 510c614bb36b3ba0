"""The domain's exceptions; the API maps each to one status code."""

from __future__ import annotations


class HourglassError(Exception):
    """Base of every error the service reports to a client."""


class MessageNotFound(HourglassError):
    """No message with that key in that queue."""


class CronEntryNotFound(HourglassError):
    """No cron entry of that name in that queue."""


class CronEntryTooLarge(HourglassError):
    """A cron entry whose schedule and payload do not fit what one entry may keep installed."""


class LockNotFound(HourglassError):
    """The lock id holds no message: acknowledged, lease lost, or updated since."""


class InvalidPayload(HourglassError):
    """A payload that is not a JSON value (NaN, Infinity)."""


class PayloadTooDeep(HourglassError):
    """A payload whose arrays and objects nest deeper than the service takes."""


class PayloadTooLarge(HourglassError):
    """An encoded payload is larger than the configured limit."""


class InvalidSettings(HourglassError):
    """Queue settings or a redrive that cannot work (a queue its own dead-letter queue)."""


class QueueForbidden(HourglassError):
    """The request's token may not use a queue the request names, in its path or beyond."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"this token may not use queue {queue!r}")
        self.queue = queue


class PurgeNotConfirmed(HourglassError):
    """A purge did not repeat the queue's name in `confirm`."""


class StorageUnavailable(HourglassError):
    """The database cannot be reached or did not answer in time; worth retrying."""


class CursorNotFound(HourglassError):
    """A list's `cursor` (well formed) that no list of this kind handed out: it names no page."""
