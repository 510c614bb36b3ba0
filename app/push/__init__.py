"""Push delivery (docs/guide/push.md): the dispatcher that claims due messages of push queues
over the queue service, the sender that POSTs each to its endpoint, and how it is signed."""
