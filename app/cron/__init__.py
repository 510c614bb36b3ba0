"""Cron: recurring schedules installed as ordinary delayed messages."""
