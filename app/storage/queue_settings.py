"""Each queue's own settings (lease, delivery limit, dead-letter queue, retry delays, push,
concurrency and rate limits), and which queues are paused
(docs/decisions/0025-pause-and-resume.md)."""

from __future__ import annotations

from typing import Any

from app.domain.messages import PushTarget, QueueSettings, Rate, RetryPolicy
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.runner import Runner


class SqlSettings:
    """Queue settings, one row per queue that has settings of its own."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.statements = dialect.statements.settings
        self.mark_groups = dialect.statements.groups.queue_groups_mark

    async def get(self, queue: str) -> QueueSettings | None:
        """The queue's own settings, or None when it has the defaults."""
        row = await self.runner.first(self.statements.settings_select, {"queue": queue})
        return None if row is None else _settings_of(row)

    async def pushing(self) -> list[QueueSettings]:
        """The settings of every queue that pushes its messages, by queue name."""
        return [
            _settings_of(row)
            for row in await self.runner.rows(self.statements.settings_pushing, {})
        ]

    async def queues(self) -> list[str]:
        """The queues that have settings of their own."""
        return [row[0] for row in await self.runner.rows(self.statements.settings_queues, {})]

    async def put(self, settings: QueueSettings) -> QueueSettings:
        """Store the queue's settings, replacing any it had."""
        retry = settings.retry
        retry_columns = {
            "retryInitialDelayMs": retry.initial_delay_ms if retry else None,
            "retryMaxDelayMs": retry.max_delay_ms if retry else None,
            "retryMultiplier": retry.multiplier if retry else None,
            "retryJitter": retry.jitter if retry else None,
        }
        push = settings.push
        push_columns = {
            "pushUrl": push.url if push else None,
            "pushTimeoutMs": push.timeout_ms if push else None,
            "pushConcurrency": push.concurrency if push else None,
        }
        rate = settings.rate
        limit_columns = {
            "maxLeased": settings.max_leased,
            "rateLimit": rate.limit if rate else None,
            "ratePeriodMs": rate.period_ms if rate else None,
        }
        values = {
            "new_default_lease_ms": settings.default_lease_ms,
            "new_max_deliveries": settings.max_deliveries,
            "new_dead_letter_queue": settings.dead_letter_queue,
            "new_retry_initial_delay_ms": retry_columns["retryInitialDelayMs"],
            "new_retry_max_delay_ms": retry_columns["retryMaxDelayMs"],
            "new_retry_multiplier": retry_columns["retryMultiplier"],
            "new_retry_jitter": retry_columns["retryJitter"],
            "new_push_url": push_columns["pushUrl"],
            "new_push_timeout_ms": push_columns["pushTimeoutMs"],
            "new_push_concurrency": push_columns["pushConcurrency"],
            "new_group_concurrency": settings.group_concurrency,
            "new_max_leased": limit_columns["maxLeased"],
            "new_rate_limit": limit_columns["rateLimit"],
            "new_rate_period_ms": limit_columns["ratePeriodMs"],
            "now": settings.updated_at,
        }

        async def put(connection: Connection) -> None:
            stored = await connection.execute(
                self.statements.settings_select, {"queue": settings.queue}
            )
            before = stored.first()
            concurrency_before = None if before is None else before.groupConcurrency
            updated = await connection.execute(
                self.statements.settings_update, {"settings_queue": settings.queue, **values}
            )
            if not updated.rowcount:
                await connection.execute(
                    self.statements.settings_insert,
                    {
                        "queue": settings.queue,
                        "defaultLeaseMs": settings.default_lease_ms,
                        "maxDeliveries": settings.max_deliveries,
                        "deadLetterQueue": settings.dead_letter_queue,
                        "updatedAt": settings.updated_at,
                        **retry_columns,
                        **push_columns,
                        "groupConcurrency": settings.group_concurrency,
                        **limit_columns,
                    },
                )
            # A changed concurrency: every group's front is weighed again, by a keeper
            # that reads these settings (docs/decisions/0027-message-groups.md).
            if concurrency_before != settings.group_concurrency:
                await connection.execute(self.mark_groups, {"queue": settings.queue})

        await self.runner.transaction_over_keys(put, f"on the settings of {settings.queue!r}")
        return settings

    async def pause(self, queue: str, now: int) -> int:
        """Pause the queue, if it is not paused already; since when it is paused."""

        async def pause(connection: Connection) -> int:
            paused_at = (
                await connection.execute(self.statements.pause_select, {"queue": queue})
            ).scalar()
            if paused_at is None:
                await connection.execute(
                    self.statements.pause_insert, {"queue": queue, "pausedAt": now}
                )
                paused_at = now
            return paused_at

        return await self.runner.transaction_over_keys(pause, f"pausing {queue!r}")

    async def resume(self, queue: str) -> bool:
        """Resume the queue; whether it was paused."""
        return await self.runner.single(self.statements.pause_delete, {"queue": queue}) > 0

    async def paused_at(self, queue: str) -> int | None:
        """Since when the queue has been paused, or None while it delivers."""
        return await self.runner.scalar(self.statements.pause_select, {"queue": queue})


def _settings_of(row: Any) -> QueueSettings:
    return QueueSettings(
        queue=row.queue,
        default_lease_ms=row.defaultLeaseMs,
        max_deliveries=row.maxDeliveries,
        dead_letter_queue=row.deadLetterQueue,
        updated_at=row.updatedAt,
        retry=_retry_of(row),
        push=_push_of(row),
        group_concurrency=row.groupConcurrency,
        max_leased=row.maxLeased,
        rate=rate_of(row),
    )


def rate_of(row: Any) -> Rate | None:
    """The rate a settings row stores (its two columns set together), or None."""
    if row.rateLimit is None:
        return None
    return Rate(limit=row.rateLimit, period_ms=row.ratePeriodMs)


def _push_of(row: Any) -> PushTarget | None:
    """The push target a settings row stores (its three columns set together), or None."""
    if row.pushUrl is None:
        return None
    return PushTarget(
        url=row.pushUrl, timeout_ms=row.pushTimeoutMs, concurrency=row.pushConcurrency
    )


def _retry_of(row: Any) -> RetryPolicy | None:
    """The retry policy a settings row stores (its four columns set together), or None."""
    if row.retryInitialDelayMs is None:
        return None
    return RetryPolicy(
        initial_delay_ms=row.retryInitialDelayMs,
        max_delay_ms=row.retryMaxDelayMs,
        multiplier=row.retryMultiplier,
        jitter=row.retryJitter,
    )
