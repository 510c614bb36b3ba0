"""bench/floor.py, the floor of the stack: its app has the two routes the probe and
bench/calls.py measure, at the service's paths, and nothing opens at import."""

from __future__ import annotations

from starlette.routing import Route

from bench import floor


def test_the_floor_serves_an_empty_poll_and_an_offer_at_the_services_paths():
    app = floor.create_app("postgresql://nobody@127.0.0.1:1/never")  # opened only on start
    routes = {
        (route.path, method)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    assert ("/v1/queues/{queue}/poll", "POST") in routes
    assert ("/v1/queues/{queue}/messages/{key:path}", "PUT") in routes
    assert isinstance(floor.app, floor.FloorApi)
