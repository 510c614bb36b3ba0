"""Push delivery (SPEC §12): the dispatcher that POSTs due messages of push queues to their
endpoints, over the queue service, and how each request is signed."""
