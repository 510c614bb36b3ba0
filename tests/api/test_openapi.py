"""openapi.yaml at the top of the repository is the app's generated schema, exactly; and
what it says of methods holds."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "openapi.yaml"


def test_openapi_yaml_matches_the_generated_schema():
    generated = create_app(Settings(database_url="sqlite://")).openapi()
    committed = yaml.safe_load(OPENAPI_FILE.read_text())
    assert committed == generated, "openapi.yaml is stale: run `hourglass openapi > openapi.yaml`"


def test_every_error_is_documented_as_problem_json():
    schema = create_app(Settings(database_url="sqlite://")).openapi()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
            if path.startswith("/v1/"):
                assert "503" in operation["responses"], (method, path)


def test_a_method_a_path_does_not_have_is_405_naming_those_it_has():
    # Every answer 405 carries Allow (RFC 9110), listing every operation of the path, not
    # only the first route's (a message's GET and DELETE are routes of their own).
    settings = Settings(database_url="postgresql://root@127.0.0.1:1/none", auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        paths = client.app.openapi()["paths"]
        for path in paths:
            url = re.sub(r"\{[^}]+\}", "x", path)
            # Every operation of each path that URL names: a cron entry's name may hold
            # slashes, so …/cron/x/pause is also the entry "x/pause".
            documented = {
                method.upper()
                for other, item in paths.items()
                if _names(other, url)
                for method in item
            }
            for method in {"OPTIONS", "PATCH", "PUT", "TRACE"} - documented:
                response = client.request(method, url)
                assert response.status_code == 405, (method, path)
                assert response.headers["content-type"] == "application/problem+json"
                allowed = set(response.headers["allow"].split(", "))
                # HEAD comes with GET where Starlette serves it (an implicit method).
                assert allowed - {"HEAD"} == documented, (method, path, allowed)


def _names(path: str, url: str) -> bool:
    """Whether the documented `path` matches `url`; a cron entry's `{name}` and a message's
    `{key}` are paths."""
    pattern = re.escape(path).replace(r"\{name\}", ".+").replace(r"\{key\}", ".+")
    pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
    return re.fullmatch(pattern, url) is not None


# Operation ids are what a generated client names its methods after (openapi-typescript's
# `paths`, openapi-python-client, openapi-generator): renaming one breaks every such client,
# so they are held here, and a change to one is a change to this list.
OPERATION_IDS = {
    ("GET", "/healthz"): "checkLiveness",
    ("GET", "/readyz"): "checkReadiness",
    ("GET", "/metrics"): "getMetrics",
    ("GET", "/v1/queues"): "listQueues",
    ("GET", "/v1/queues/{queue}"): "getQueueStats",
    ("DELETE", "/v1/queues/{queue}"): "purgeQueue",
    ("POST", "/v1/queues/{queue}/pause"): "pauseQueue",
    ("POST", "/v1/queues/{queue}/resume"): "resumeQueue",
    ("GET", "/v1/queues/{queue}/settings"): "getQueueSettings",
    ("PUT", "/v1/queues/{queue}/settings"): "replaceQueueSettings",
    ("POST", "/v1/queues/{queue}/redrive"): "redriveQueue",
    ("GET", "/v1/queues/{queue}/history"): "listHistory",
    ("PUT", "/v1/queues/{queue}/messages/{key}"): "offerMessage",
    ("POST", "/v1/queues/{queue}/messages/{key}"): "updateMessage",
    ("GET", "/v1/queues/{queue}/messages/{key}"): "getMessage",
    ("DELETE", "/v1/queues/{queue}/messages/{key}"): "deleteMessage",
    ("POST", "/v1/queues/{queue}/messages"): "createMessage",
    ("GET", "/v1/queues/{queue}/messages"): "listMessages",
    ("POST", "/v1/queues/{queue}/batch"): "offerBatch",
    ("POST", "/v1/queues/{queue}/poll"): "pollQueue",
    ("DELETE", "/v1/queues/{queue}/locks/{lock_id}"): "acknowledgeLock",
    ("PATCH", "/v1/queues/{queue}/locks/{lock_id}"): "extendLock",
    ("POST", "/v1/queues/{queue}/locks/{lock_id}/ack"): "acknowledgeKeys",
    ("POST", "/v1/queues/{queue}/locks/{lock_id}/release"): "releaseLock",
    ("PUT", "/v1/queues/{queue}/cron/{name}"): "installCronEntry",
    ("GET", "/v1/queues/{queue}/cron/{name}"): "getCronEntry",
    ("DELETE", "/v1/queues/{queue}/cron/{name}"): "uninstallCronEntry",
    ("GET", "/v1/queues/{queue}/cron"): "listCronEntries",
    ("POST", "/v1/queues/{queue}/cron/{name}/pause"): "pauseCronEntry",
    ("POST", "/v1/queues/{queue}/cron/{name}/resume"): "resumeCronEntry",
}


def test_operation_ids_are_short_lower_camel_case_unique_and_unchanged():
    schema = yaml.safe_load(OPENAPI_FILE.read_text())
    found = {
        (method.upper(), path): operation.get("operationId")
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    assert found == OPERATION_IDS
    assert len(set(found.values())) == len(found)
    for operation_id in found.values():
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", operation_id), operation_id
        assert len(operation_id) <= 30, operation_id


def test_the_document_names_its_server_and_its_open_probes():
    # What `redocly lint` (recommended rules, in .ci/run) asks of it: a server, a license,
    # and the probes' openness said (an empty `security`), not left to a default.
    schema = yaml.safe_load(OPENAPI_FILE.read_text())
    assert schema["servers"] == [
        {"url": "/", "description": "The service that serves this document"}
    ]
    assert schema["info"]["license"]["identifier"] == "Apache-2.0"
    for probe in ("/healthz", "/readyz"):
        assert schema["paths"][probe]["get"]["security"] == []
