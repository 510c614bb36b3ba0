"""The import's database URL: its PostgreSQL sessions named, so pg_stat_activity tells them
from the service's (and a test waits for exactly a killed import's to end)."""

from __future__ import annotations

import pytest

from app.pipeline import IMPORT_APPLICATION_NAME
from app.pipeline.importer import named_for_import
from app.storage.dialects import for_engine_url


def test_the_sessions_of_an_import_on_postgresql_carry_its_name():
    url = named_for_import("postgresql+psycopg://app:p%40ss@db:5432/hourglass?sslmode=require")
    arguments = for_engine_url(url).connect_arguments(url)
    assert arguments["application_name"] == IMPORT_APPLICATION_NAME
    # The rest of the URL as it was.
    assert (arguments["password"], arguments["sslmode"]) == ("p@ss", "require")


def test_a_name_the_url_gives_stays():
    url = "postgresql+psycopg://app@db/hourglass?application_name=nightly-import"
    assert named_for_import(url) == url


@pytest.mark.parametrize("url", ["sqlite:///hourglass.db", "mariadb+mysqldb://app@db/hourglass"])
def test_other_databases_get_the_url_as_it_is(url):
    assert named_for_import(url) == url
