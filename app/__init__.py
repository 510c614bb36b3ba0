"""Hourglass: a delayed-message service over HTTP, backed by a relational database."""

__version__ = "0.1.0"
