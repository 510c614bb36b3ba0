"""Every /v1 operation once, without I/O: the request it sends and how its answer is read.

`Client` and `AsyncClient` (client.py) are two thin transports over this table: each
of their methods is an operation below, sent and parsed by the transport. An
operation also says whether it is safe to send again when its answer may have been
lost (`repeatable`), which is what the transports' retries go by. The operations live
by area, each a function that builds a `Call` (call.py): `messages`, `locks` (polls and
leases), `queue_admin` (stats, pause, purge, settings, redrive) and `cron`.
"""

from hourglass_client._operations.call import Call
from hourglass_client._operations.cron import (
    cron_entries,
    get_cron,
    install_cron,
    pause_cron,
    resume_cron,
    uninstall_cron,
)
from hourglass_client._operations.locks import (
    ack,
    ack_keys,
    extend,
    poll,
    release,
    release_keys,
)
from hourglass_client._operations.messages import (
    batch,
    create,
    delete,
    get,
    history,
    list_messages,
    offer,
    update,
)
from hourglass_client._operations.queue_admin import (
    get_settings,
    pause,
    purge,
    put_settings,
    queues,
    redrive,
    resume,
    stats,
)

__all__ = [
    "Call",
    "ack",
    "ack_keys",
    "batch",
    "create",
    "cron_entries",
    "delete",
    "extend",
    "get",
    "get_cron",
    "get_settings",
    "history",
    "install_cron",
    "list_messages",
    "offer",
    "pause",
    "pause_cron",
    "poll",
    "purge",
    "put_settings",
    "queues",
    "redrive",
    "release",
    "release_keys",
    "resume",
    "resume_cron",
    "stats",
    "uninstall_cron",
    "update",
]
