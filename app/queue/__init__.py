"""The delayed queue's domain: messages, leases and the rules that govern them."""
