"""The monitoring kit in deploy/ speaks of what the service really exports: every metric name
in the Grafana dashboard and the Prometheus alerts is in the scrape of a live `hourglass serve`
after traffic that makes every metric family appear; the files hold together (compose mounts,
scrape target, provisioning paths, dashboard variables and units); promtool passes them."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import Metrics
from app.metrics.table_health import FAMILIES as TABLE_HEALTH_FAMILIES
from tests.conftest import Database, required_or_skip, truncate_all
from tests.support.push_receiver import PushReceiver, push_receiver
from tests.support.server import Server, running_server

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "hourglass.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
COMPOSE = ROOT / "docker-compose.yml"

# Series Prometheus makes itself for every scrape, not the service.
PROMETHEUS_SERIES = {"up"}
# The tables' health families each database tells (docs/decisions/0024-table-health.md);
# the others are absent from its scrape by design.
TABLE_HEALTH = {
    "postgresql": set(TABLE_HEALTH_FAMILIES) - {"hourglass_innodb_history_length"},
    "mariadb": {"hourglass_vacuum_held_back_seconds", "hourglass_innodb_history_length"},
    "sqlite": set(),
}
# How long the test waits for an event (a push answered, a connection closed).
WAIT_SECONDS = 30
HEAD_TIMEOUT = 1.0

# -- PromQL: which identifiers are metric names -------------------------------------------

# Aggregation operators, keywords and binary operators: never metric names, even when no
# "(" follows them (`sum by (queue) (…)`, `x offset 10m`, `a and b`).
_KEYWORDS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "atan2", "inf", "nan",
}  # fmt: skip
# Keywords followed by a list of label names in parentheses.
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS_AND_RANGES = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]")
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_TOKEN = re.compile(r"(?P<number>\.?\d[\w.]*)|(?P<name>[A-Za-z_:][\w:]*)|(?P<other>\S)")
# Grafana's label_values(selector, label): the label is no metric.
_LABEL_VALUES = re.compile(r"label_values\((?P<selector>.*),\s*\w+\s*\)\s*$", re.DOTALL)


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) selects."""
    if match := _LABEL_VALUES.match(expression.strip()):
        expression = match["selector"]
    # Strings first (a '}' or '[' may be in a regex), then label matchers and ranges
    # (label names, durations, $__rate_interval), then Grafana's variables elsewhere.
    text = _STRING.sub('""', expression)
    text = _MATCHERS_AND_RANGES.sub(" ", text)
    text = _GRAFANA_VARIABLE.sub(" ", text)
    tokens = [(match.lastgroup, match.group()) for match in _TOKEN.finditer(text)]
    names = set()
    index = 0
    while index < len(tokens):
        kind, token = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        index += 1
        if kind != "name":
            continue
        if token.lower() in _LABEL_LISTS and following == "(":
            depth = 0
            while index < len(tokens):  # past the label list, to its ")"
                depth += {"(": 1, ")": -1}.get(tokens[index][1], 0)
                index += 1
                if depth == 0:
                    break
        elif following == "(" or token.lower() in _KEYWORDS:
            continue  # a function, an aggregation or a keyword
        else:
            names.add(token)
    return names


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_expressions() -> list[str]:
    """Every query of the dashboard: its panels' targets and its query variables."""
    dashboard = _dashboard()
    expressions = [
        target["expr"]
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            expressions.append(query["query"] if isinstance(query, dict) else query)
    return expressions


def alert_rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def unknown_names(expressions: list[str], exported: set[str]) -> dict[str, set[str]]:
    """The names each expression selects that are neither exported nor Prometheus's own."""
    unknown = {
        expression: metric_names(expression) - exported - PROMETHEUS_SERIES
        for expression in expressions
    }
    return {expression: names for expression, names in unknown.items() if names}


def test_metric_names_are_told_from_functions_keywords_labels_and_variables():
    assert metric_names(
        "histogram_quantile(0.99, sum by (le, queue) (rate(hourglass_push_duration_seconds_bucket"
        '{job=~"$job", queue=~"$queue"}[$__rate_interval])))'
    ) == {"hourglass_push_duration_seconds_bucket"}
    assert metric_names(
        "sum by (queue) (increase(a_total[10m])) > 0 or count by (queue) "
        '(time() - a_created{job="hourglass", queue!~".+\\\\.dead"} < 600)'
    ) == {"a_total", "a_created"}
    assert metric_names(
        "sum without (instance) (rate(x_total[5m] offset 1h)) / ignoring (kind) "
        "group_left (version) y_info and on (job) z == bool 1e3"
    ) == {"x_total", "y_info", "z"}
    assert metric_names('max(up{job="a}b[c"}) unless absent(hourglass_ready)') == {
        "up",
        "hourglass_ready",
    }
    assert metric_names('label_values(hourglass_queue_messages{job=~"$job"}, queue)') == {
        "hourglass_queue_messages"
    }
    assert metric_names("sum(rate(m:recorded_rule:5m[${__rate_interval}])) by (queue)") == {
        "m:recorded_rule:5m"
    }


# -- a live service after traffic that makes every metric family appear --------------------


def _samples(server: Server) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> (labels, value) of every sample of one scrape."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _call(method: str, server: Server, path: str, status: int, **options: Any) -> httpx.Response:
    answer = httpx.request(method, f"{server.url}{path}", timeout=WAIT_SECONDS, **options)
    assert answer.status_code == status, (method, path, answer.text)
    return answer


def _make_traffic(server: Server, receiver: PushReceiver) -> None:
    """Offers, polls (with messages and empty, and one held back by a limit), an
    acknowledgement, a release, a dead letter, an expired message, cron runs, a push, 4xx
    answers, and a connection dropped for want of a head."""
    _call("PUT", server, "/v1/queues/orders/settings", 200, json={"max_deliveries": 1})
    _call("PUT", server, "/v1/queues/orders/messages/a", 201, json={"payload": 1})
    _call("POST", server, "/v1/queues/orders/batch", 200,
          json={"messages": [{"key": "b", "payload": 2}, {"key": "b", "payload": 2}]})  # fmt: skip
    lock = _call("POST", server, "/v1/queues/orders/poll", 200, json={"max": 1}).json()["lock_id"]
    _call("DELETE", server, f"/v1/queues/orders/locks/{lock}", 204)  # acknowledged
    lock = _call("POST", server, "/v1/queues/orders/poll", 200, json={"max": 1}).json()["lock_id"]
    _call("POST", server, f"/v1/queues/orders/locks/{lock}/release", 204)
    # Its one delivery used up, the poll that finds it again moves it to orders.dead.
    assert _call("POST", server, "/v1/queues/orders/poll", 200, json={}).json()["messages"] == []
    assert _call("GET", server, "/v1/queues/orders.dead/messages/b", 200).json()["key"] == "b"
    # A message offered already past its expiry: the sweep moves it to orders.dead.
    _call("PUT", server, "/v1/queues/orders/messages/e", 201,
          json={"payload": 3, "expires_at": "2020-01-01T00:00:00Z"})  # fmt: skip
    for _ in range(10_000):  # within a sweep or two (0.25 s each), no sleep
        answer = httpx.get(f"{server.url}/v1/queues/orders.dead/messages/e", timeout=WAIT_SECONDS)
        if answer.status_code == 200 and answer.json()["expired"]:
            break
    else:
        raise AssertionError("the expired message was never swept")
    _call("PUT", server, "/v1/queues/ticks/cron/tick", 201, json={"payload": 1, "every": 3600})
    # A poll held back by a limit: one leased at most, and one is.
    _call("PUT", server, "/v1/queues/limited/settings", 200, json={"max_leased": 1})
    _call("POST", server, "/v1/queues/limited/batch", 200,
          json={"messages": [{"key": "l1", "payload": 1}, {"key": "l2", "payload": 2}]})  # fmt: skip
    assert (
        len(_call("POST", server, "/v1/queues/limited/poll", 200, json={}).json()["messages"]) == 1
    )
    assert _call("POST", server, "/v1/queues/limited/poll", 200, json={}).json()["messages"] == []
    _call("PUT", server, "/v1/queues/orders/messages/c", 422, json={"payload": 1, "delay": -1})
    _call("GET", server, "/v1/queues/orders/messages/missing", 404)

    push = {"url": f"{receiver.url}/hook"}
    _call("PUT", server, "/v1/queues/pushed/settings", 200, json={"push": push})
    _call("PUT", server, "/v1/queues/pushed/messages/p", 201, json={"payload": 1})
    assert receiver.wait_until(lambda receiver: receiver.succeeded() >= 1, WAIT_SECONDS)

    # A connection that sends no request head is closed after HEAD_TIMEOUT: recv()
    # returns when the server closes it.
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS) as silent:
        assert silent.recv(1) == b""


@pytest.fixture(scope="module")
def scraped(database: Database) -> dict[str, list[tuple[dict[str, str], float]]]:
    """One scrape of a live service after the traffic above, on each database."""
    truncate_all(database.url)
    environment = {"HOURGLASS_REQUEST_HEAD_TIMEOUT": str(HEAD_TIMEOUT)}
    with push_receiver() as receiver:
        environment["HOURGLASS_PUSH_ALLOWED"] = receiver.url + "/"
        with running_server(database.url, **environment) as server:
            _make_traffic(server, receiver)
            # The dispatcher counts a push once it has read the answer the receiver
            # wrote: scrape again (no sleep) until it has, within the bound.
            for _ in range(1000):
                samples = _samples(server)
                if "hourglass_push_requests_total" in samples:
                    return samples
            raise AssertionError("the push the receiver answered was never counted")


def test_traffic_makes_every_metric_family_appear(scraped, database):
    # Every collector of app/metrics/ has samples: the traffic covers them all, so a
    # name missing below is misspelled, not merely unexercised.
    families = {
        family.name for family in text_string_to_metric_families(Metrics().exposition().decode())
    }
    with_samples = {
        family
        for family in families
        if any(name == family or name.startswith(family + "_") for name in scraped)
    }
    assert with_samples == families
    for name in (
        "hourglass_messages_dead_lettered_total",
        "hourglass_messages_expired_total",
        "hourglass_push_requests_total",
        "hourglass_push_duration_seconds_bucket",
        "hourglass_connections_dropped_total",
        "hourglass_cron_runs_installed_total",
        "hourglass_delivery_lateness_seconds_bucket",
    ):
        assert sum(value for _, value in scraped[name]) > 0, name
    assert [value for _, value in scraped["hourglass_ready"]] == [1.0]
    # The tables' health: what the database tells, from the first scrape.
    assert set(TABLE_HEALTH_FAMILIES) & set(scraped) == TABLE_HEALTH[database.name]


def test_every_metric_in_the_dashboard_and_the_alerts_is_exported(scraped, database):
    # A table health family this database does not tell is checked on the one that does.
    exported = set(scraped) | (set(TABLE_HEALTH_FAMILIES) - TABLE_HEALTH[database.name])
    expressions = dashboard_expressions() + [rule["expr"] for rule in alert_rules()]
    assert len(expressions) > 30
    assert unknown_names(expressions, exported) == {}
    # Each file draws on most of what the service exports.
    named = set().union(*(metric_names(expression) for expression in dashboard_expressions()))
    assert {"hourglass_queue_messages", "hourglass_push_requests_total"} <= named
    assert set(TABLE_HEALTH_FAMILIES) <= named  # the Table health row shows each


def test_a_misspelled_metric_name_is_caught(scraped):
    exported = set(scraped)
    for expression in dashboard_expressions() + [rule["expr"] for rule in alert_rules()]:
        for name in metric_names(expression) - PROMETHEUS_SERIES:
            typo = name.replace("hourglass_", "hourglas_")
            misspelled = re.sub(rf"\b{re.escape(name)}\b", typo, expression, count=1)
            assert unknown_names([misspelled], exported), misspelled
    label_values = 'label_values(hourglass_queue_message{job=~"$job"}, queue)'
    assert unknown_names([label_values], exported) == {label_values: {"hourglass_queue_message"}}


# -- the files hold together ----------------------------------------------------------------


def test_the_dashboard_is_grafana_json_with_its_variables_units_and_rate_windows():
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 39
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["queue"]["includeAll"] and variables["queue"]["multi"]
    assert "label_values(" in variables["queue"]["query"]["query"]
    panels = [panel for panel in _panels(dashboard["panels"]) if panel["type"] != "row"]
    assert len({panel["id"] for panel in _panels(dashboard["panels"])}) == len(
        list(_panels(dashboard["panels"]))
    )
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        for target in panel["targets"]:
            expression = target["expr"]
            for window in re.findall(r"\[([^\]]*)\]", expression):
                assert window == "$__rate_interval", (panel["title"], expression)
            if "histogram_quantile" in expression:
                assert re.search(r"sum by \(le\b", expression), expression
                assert "_bucket{" in expression
            if re.search(r"\bby \([^)]*\bqueue\b", expression):
                assert 'queue=~"$queue"' in expression, expression
    titles = " ".join(panel["title"].lower() for panel in panels)
    for subject in ("queue depth", "oldest ready", "offers", "deliveries", "dead letters",
                    "lateness p50 and p99", "latency", "503", "push", "dead and live rows",
                    "vacuum held back", "last vacuum"):  # fmt: skip
        assert subject in titles, subject


def test_every_alert_has_a_duration_a_severity_and_words_for_its_queue():
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} >= {
        "HourglassOldestReadyMessageWaiting",
        "HourglassDeadLetters",
        "HourglassAnswering503",
        "HourglassReplicaDown",
        "HourglassReplicaNotReady",
        "HourglassCronFailing",
        "HourglassVacuumHeldBack",
    }
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        # Dead letters are events: each fires at once; the others must last.
        assert ("for" in rule) == (rule["alert"] != "HourglassDeadLetters"), rule["alert"]
        if "by (queue)" in rule["expr"]:
            assert "{{ $labels.queue }}" in rule["annotations"]["summary"], rule["alert"]


def test_compose_prometheus_and_grafana_point_at_each_other():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), volume
    prometheus = yaml.safe_load(PROMETHEUS.read_text())
    for rule_file in prometheus["rule_files"]:
        assert (PROMETHEUS.parent / rule_file).is_file()
    (job,) = prometheus["scrape_configs"]
    assert job["job_name"] == "hourglass"  # the alerts select job="hourglass"
    assert all('job="hourglass"' in rule["expr"] for rule in alert_rules())
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in services and services[host]["ports"] == [f"8080:{port}"]

    provisioning = DEPLOY / "grafana" / "provisioning"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dashboards = yaml.safe_load((provisioning / "dashboards" / "hourglass.yml").read_text())
    path = dashboards["providers"][0]["options"]["path"]
    mounts = dict(volume.rsplit(":", 2)[:2] for volume in services["grafana"]["volumes"])
    assert mounts["./deploy/grafana/hourglass.json"] == f"{path}/hourglass.json"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(["check", "rules", str(ALERTS)], id="check rules"),
        pytest.param(["test", "rules", str(ALERT_TESTS)], id="test rules"),
        pytest.param(["check", "config", str(PROMETHEUS)], id="check config"),
    ],
)
def test_promtool_passes_the_rules_and_the_config(arguments):
    promtool = shutil.which("promtool")
    if promtool is None:
        required_or_skip("promtool", "not installed (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, *arguments], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_validates_with_the_monitoring_profile():
    compose = shutil.which("docker-compose")
    if compose is None:
        required_or_skip("docker-compose", "not installed (apt-get install docker-compose)")
    done = subprocess.run(
        [compose, "--profile", "monitoring", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
