"""The statements of queue settings (one row per queue that has settings of its own) and of
pauses (one row per paused queue).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, insert, select, update

from app.storage.tables import queue_pauses, queue_settings

__all__ = [
    "pause_delete",
    "pause_insert",
    "pause_select",
    "pauses_select",
    "settings_insert",
    "settings_pushing",
    "settings_queues",
    "settings_select",
    "settings_update",
]

settings = queue_settings.c
settings_select = select(queue_settings).where(settings.queue == bindparam("queue"))
settings_queues = select(settings.queue)
# The push dispatcher's refresh (every few seconds per replica): the few rows that push.
settings_pushing = (
    select(queue_settings).where(settings.pushUrl.is_not(None)).order_by(settings.queue)
)
settings_insert = insert(queue_settings)
# Not "queue": an UPDATE reserves its columns' names for their new values.
settings_update = (
    update(queue_settings)
    .where(settings.queue == bindparam("settings_queue"))
    .values(
        defaultLeaseMs=bindparam("new_default_lease_ms"),
        maxDeliveries=bindparam("new_max_deliveries"),
        deadLetterQueue=bindparam("new_dead_letter_queue"),
        retryInitialDelayMs=bindparam("new_retry_initial_delay_ms"),
        retryMaxDelayMs=bindparam("new_retry_max_delay_ms"),
        retryMultiplier=bindparam("new_retry_multiplier"),
        retryJitter=bindparam("new_retry_jitter"),
        pushUrl=bindparam("new_push_url"),
        pushTimeoutMs=bindparam("new_push_timeout_ms"),
        pushConcurrency=bindparam("new_push_concurrency"),
        groupConcurrency=bindparam("new_group_concurrency"),
        maxLeased=bindparam("new_max_leased"),
        rateLimit=bindparam("new_rate_limit"),
        ratePeriodMs=bindparam("new_rate_period_ms"),
        updatedAt=bindparam("now"),
    )
)

pauses = queue_pauses.c
pause_select = select(pauses.pausedAt).where(pauses.queue == bindparam("queue"))
pauses_select = select(pauses.queue, pauses.pausedAt).order_by(pauses.queue)
pause_insert = insert(queue_pauses)
pause_delete = delete(queue_pauses).where(pauses.queue == bindparam("queue"))
