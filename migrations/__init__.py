"""Alembic migrations; `app/migrations` links here, and the wheel carries them there."""
