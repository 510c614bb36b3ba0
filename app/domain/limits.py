"""The contract's bounds on requests that no domain type owns: leases, polls, batches, lock
keys, retry growth, deliveries and rates.

A client relies on each (docs/api/reference.md shows each field's bounds, and
docs/api/index.md the rules around them), and the API's schemas enforce them. Bounds that belong to a type stay beside it: delays, ttls, priorities and groups in
messages.py, pages and cursors in pages.py, push targets in push.py, an entry's lookahead
in cron.py and its schedule's in schedule.py, payloads in payloads.py.
"""

from __future__ import annotations

# The longest lease a poll, an extension or a queue's default may ask for, in seconds.
MAX_LEASE_SECONDS = 12 * 3600
# Messages per batch offer, and per poll.
MAX_BATCH = 1000
MAX_POLL = 1000
# Keys per per-key acknowledgement or release: a poll's most messages.
MAX_LOCK_KEYS = MAX_POLL
# Retry delays grow by at most this factor per delivery.
MAX_RETRY_MULTIPLIER = 100
# The most deliveries a queue's `max_deliveries` may allow.
MAX_DELIVERIES_LIMIT = 1000
# A queue's rate (docs/guide/flow-control.md): deliveries per window, and the window's length.
MAX_RATE_LIMIT = 100_000
MAX_RATE_PERIOD_SECONDS = 24 * 3600
