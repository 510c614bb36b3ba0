"""The hot routes' own request handling (docs/decisions/0022-one-hop-per-request.md): their body read with their models from the
raw bytes, their answer bytes built by the endpoint, and the rest of FastAPI's per-request
work left out.

FastAPI handles a request by solving the endpoint's parameters as dependencies (generic code,
~100 `isinstance` calls for a path parameter, a body and the `Request`), parsing the body with
`json.loads` and validating the result in Python mode, then serialising what the endpoint
returns through its response model. A `LeanRoute` serves an endpoint that takes only path
parameters, at most one body and the `Request`, and returns a `Response`: the body is
validated straight from its bytes in JSON mode by a `TypeAdapter` of the body's own
annotation (one call into pydantic-core), the path parameters by FastAPI's own fields, and the
endpoint's `Response` is sent as it is. Routing, the middleware (auth, limits, request ids,
durations), the error handlers and the OpenAPI document are FastAPI's as before: the route is
declared as any other, and `openapi.yaml` is generated from the same declaration.

A refusal is FastAPI's, exactly: when the JSON-mode validation refuses a body (or the body is
not JSON by its Content-Type, or is empty), the request takes FastAPI's way from there —
`json.loads`, its `json_invalid` error, its 400 for a body it cannot read, Python-mode
validation by the route's body field — so every `422` keeps its `errors`, `loc` and order
(path errors before the body's; a body that is not JSON, alone), and what the JSON parser refuses
but `json.loads` reads (a UTF-8 BOM, UTF-16, a lone surrogate escape, nesting past 200
levels) is still taken as before. What the JSON-mode validation takes, the Python-mode one
takes too, with the same value: tests/api/test_lean_routes.py checks that on bodies drawn
for each model, and sends some 480 requests to these routes both ways, to the same answers.
"""

from __future__ import annotations

import copy
import email.message
import inspect
import json
from collections.abc import Callable, Coroutine
from functools import lru_cache
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException

Endpoint = TypeVar("Endpoint", bound=Callable[..., Coroutine[Any, Any, Response]])


def lean_route(
    router: APIRouter, method: str, path: str, **options: Any
) -> Callable[[Endpoint], Endpoint]:
    """`@router.<method>(path, **options)`, for a hot route: served by a LeanRoute. A response
    model the endpoint's `Response` would hide from the schema is given as `response_model`."""

    def add(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(
            path, endpoint, methods=[method], route_class_override=LeanRoute, **options
        )
        return endpoint

    return add


class LeanRoute(APIRoute):
    """An APIRoute whose requests skip FastAPI's dependency solving and answer serialisation
    (see the module). Its endpoint takes path parameters, at most one body, and the Request;
    it returns a Response. Dependencies added where the route is included are not run: the
    app adds none."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return _LeanHandler(self).handle


_UNSET: Any = object()


class _LeanHandler:
    """What a LeanRoute does with each request, set up once from its declaration."""

    def __init__(self, route: APIRoute) -> None:
        dependant = route.dependant
        unsupported = (
            dependant.query_params
            or dependant.header_params
            or dependant.cookie_params
            or dependant.dependencies
            or dependant.response_param_name
            or dependant.background_tasks_param_name
            or dependant.websocket_param_name
            or dependant.http_connection_param_name
            or dependant.security_scopes_param_name
            or len(dependant.body_params) > 1
            or not inspect.iscoroutinefunction(dependant.call)
        )
        if unsupported:
            raise TypeError(
                f"{route.path}: a lean route is a coroutine function of path parameters, at "
                "most one body and the Request, nothing else"
            )
        assert dependant.call is not None
        self.call: Callable[..., Coroutine[Any, Any, Response]] = dependant.call
        self.path_fields = [(field.name, field.alias, field) for field in dependant.path_params]
        self.request_name = dependant.request_param_name
        self.body_field = route.body_field
        if self.body_field is not None:
            self.body_name = self.body_field.name
            self.body_required = self.body_field.field_info.is_required()
            # The body's own annotation (`PollRequest | None`, `PutMessage`), in JSON mode.
            self.body_from_json: TypeAdapter[Any] = TypeAdapter(
                self.body_field.field_info.annotation
            )
        strict = route.strict_content_type
        self.strict_content_type = strict if isinstance(strict, bool) else strict.value

    async def handle(self, request: Request) -> Response:
        values: dict[str, Any] = {}
        body = _UNSET  # the body's value, once validated
        unvalidated = _UNSET  # else what FastAPI would validate: parsed JSON, or bytes
        if self.body_field is not None:
            body, unvalidated = await self._read_body(request)
        errors: list[Any] = []
        path_params = request.path_params
        for name, alias, field in self.path_fields:
            value, field_errors = field.validate(
                path_params.get(alias), values, loc=("path", alias)
            )
            if field_errors:
                errors.extend(field_errors)
            else:
                values[name] = value
        if self.body_field is not None:
            if body is _UNSET:
                body = self._validate(unvalidated, errors)
            values[self.body_name] = body
        if errors:
            raise RequestValidationError(
                errors, body=None if unvalidated is _UNSET else unvalidated
            )
        if self.request_name is not None:
            values[self.request_name] = request
        return await self.call(**values)

    async def _read_body(self, request: Request) -> tuple[Any, Any]:
        """(the body validated, _UNSET), or (_UNSET, what FastAPI would validate), read as
        FastAPI reads a body: `json.loads` errors as it reports them."""
        try:
            raw = await request.body()
        except HTTPException:
            raise  # the body's bounds (app/api/limits.py)
        except Exception as error:
            raise HTTPException(400, "There was an error parsing the body") from error
        if not raw:
            return _UNSET, _UNSET
        if not _is_json(_content_type(request), self.strict_content_type):
            return _UNSET, raw
        try:
            return self.body_from_json.validate_json(raw), _UNSET
        except ValidationError:
            pass  # FastAPI's way tells what is wrong, and takes what json.loads reads
        try:
            return _UNSET, json.loads(raw)
        except json.JSONDecodeError as error:
            raise RequestValidationError(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", error.pos),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": error.msg},
                    }
                ],
                body=error.doc,
            ) from error
        except Exception as error:
            raise HTTPException(400, "There was an error parsing the body") from error

    def _validate(self, unvalidated: Any, errors: list[Any]) -> Any:
        """The body validated as FastAPI validates it (Python mode, by the route's field);
        its errors added to `errors`."""
        assert self.body_field is not None
        if unvalidated is _UNSET:  # no body
            if self.body_required:
                errors.append(_missing(("body",)))
                return None
            return copy.deepcopy(self.body_field.default)
        value, body_errors = self.body_field.validate(unvalidated, {}, loc=("body",))
        errors.extend(body_errors)
        return value


def _content_type(request: Request) -> str | None:
    for name, value in request.scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1")
    return None


@lru_cache(maxsize=64)
def _is_json(content_type: str | None, strict: bool) -> bool:
    """Whether FastAPI parses a body of this Content-Type as JSON: application/json or
    application/*+json (parameters allowed); without one, only when not strict."""
    if not content_type:
        return not strict
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _missing(loc: tuple[str, ...]) -> dict[str, Any]:
    """FastAPI's error for a required body that is not there."""
    error = ValidationError.from_exception_data(
        "Field required", [{"type": "missing", "loc": loc, "input": {}}]
    ).errors(include_url=False)[0]
    error["input"] = None
    return dict(error)
