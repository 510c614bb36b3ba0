"""Schema migrations: Alembic, configured in code so an installed package finds its revisions."""

from __future__ import annotations

from functools import cache
from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

# The Alembic revisions, found the same way installed or in a checkout: `app/migrations`
# is a symbolic link to the top-level `migrations/` in the repository, and the wheel
# carries that folder there (pyproject.toml). Nothing imports it as a module.
_SCRIPTS = resources.files("app") / "migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic config for `database_url` pointing at this release's migrations."""
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    # Alembic's config is ConfigParser-based: a literal % must be doubled.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    """Apply every migration the database lacks (safe to run from several replicas at once)."""
    command.upgrade(alembic_config(database_url), "head")


@cache
def head_revision() -> str:
    """The newest revision this release ships."""
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"expected one migration head, found {heads}")
    return heads[0]
