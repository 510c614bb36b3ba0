"""One router per resource: messages, locks, queues, health."""
