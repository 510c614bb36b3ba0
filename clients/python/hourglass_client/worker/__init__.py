"""Workers: poll a queue, run a handler per message with bounded concurrency, keep the
leases while handlers run, acknowledge each message that succeeds and release each that
fails; on SIGTERM or SIGINT, drain and stop.

`Worker` runs a plain function in a pool of threads, `AsyncWorker` a coroutine function
as tasks (workers.py). Both share one engine on an event loop (the calling thread's,
for `Worker.run`): the polls, lease extensions, acknowledgements and releases are
its requests, so a stop can cut a waiting poll short and a slow handler holds up
nothing but its own message. The engine polls and hands messages to handlers
(_engine.py), keeps leases and settles (_settling.py), and runs handlers as tasks or
on threads (_runners.py); a handler may raise `Retry` (handlers.py).
"""

from hourglass_client.worker.handlers import AsyncHandler, Handler, Retry
from hourglass_client.worker.workers import AsyncWorker, Worker

__all__ = ["AsyncHandler", "AsyncWorker", "Handler", "Retry", "Worker"]
