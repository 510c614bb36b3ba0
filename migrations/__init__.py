"""Alembic migrations; shipped in the wheel as `app.migrations`."""
