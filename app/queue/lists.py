"""Reading a queue a page at a time: its messages and its delivery history (docs/guide/messages.md,
docs/decisions/0013-list-pages.md)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from app.clock import Clock
from app.domain.messages import Finish, Message, State
from app.domain.pages import (
    DuePosition,
    HistoryEntry,
    HistoryPosition,
    KeyPosition,
    ListState,
    decode_cursor,
    encode_cursor,
)
from app.queue.ports import ListStorage
from app.storage.calls import StorageCalls


@dataclass(frozen=True, slots=True)
class MessageList:
    """A page of messages, each with its state when read, and the cursor of the next page."""

    messages: list[tuple[Message, State]]
    next: str | None


@dataclass(frozen=True, slots=True)
class HistoryList:
    entries: list[HistoryEntry]
    next: str | None


class QueueLists:
    """Pages of a queue's messages and history; cursors are opaque to clients."""

    def __init__(
        self, storage: ListStorage, calls: StorageCalls, clock: Clock, *, max_page_bytes: int
    ) -> None:
        self.storage = storage
        self.calls = calls
        self.clock = clock
        # A page's payloads stop short of this, as a poll's do (the first always fits).
        self.max_page_bytes = max_page_bytes

    async def messages(
        self,
        queue: str,
        *,
        state: ListState = ListState.ALL,
        prefix: str | None = None,
        group: str | None = None,
        cursor: str | None = None,
        limit: int,
    ) -> MessageList:
        """Messages by due time then id, or with a key `prefix` by key; of one `group`
        when given; from `cursor` on."""
        kind = KeyPosition if prefix else DuePosition
        after = decode_cursor(cursor, kind) if cursor else None
        assert after is None or isinstance(after, DuePosition | KeyPosition)
        now = self.clock.now_ms()
        page = await self.calls.run(
            partial(
                self.storage.lists.messages,
                queue,
                state=state,
                prefix=prefix or None,
                group=group,
                after=after,
                limit=limit,
                now=now,
                max_bytes=self.max_page_bytes,
            ),
            queue,
        )
        return MessageList(
            [(message, message.state(now)) for message in page.messages],
            None if page.after is None else encode_cursor(page.after),
        )

    async def history(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        cursor: str | None = None,
        limit: int,
    ) -> HistoryList:
        """The queue's history rows, newest first (of one key, of one outcome), from `cursor` on."""
        before = decode_cursor(cursor, HistoryPosition) if cursor else None
        assert before is None or isinstance(before, HistoryPosition)
        page = await self.calls.run(
            partial(
                self.storage.lists.history,
                queue,
                key=key,
                outcome=outcome,
                before=before,
                limit=limit,
            ),
            queue,
        )
        return HistoryList(page.entries, None if page.after is None else encode_cursor(page.after))
