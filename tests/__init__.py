"""Hourglass tests: unit, contract (every database), api, concurrency (PostgreSQL)."""
