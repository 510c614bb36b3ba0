"""The HTTP edge: schemas, routes and error mapping over the queue service."""
