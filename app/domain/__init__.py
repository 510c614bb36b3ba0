"""The types every layer shares: messages, outcomes, leases, errors, cron entries and
their run keys, time and name formats, stored payloads. A leaf: nothing here imports
anything else of `app`."""
