"""What every request passes before its handler runs: the method it uses, and its query parameters.

Registered as the app's ``before_request`` hook (``create_app``), so a route added later is covered
without doing anything:

* **Methods.** A path answers the methods of its route, with the custom methods (AIP-136) told
  apart: ``/v1/jobs/{jobId}`` is GET, PATCH and DELETE while ``/v1/jobs/{jobId}:pause`` is POST
  only, although one Litestar route serves both. Any other method is 405 with an ``Allow`` header
  listing what the path takes, and ``OPTIONS`` answers 204 with the same ``Allow`` (Litestar's own
  OPTIONS answer lists the methods of the first handler registered on a path, not of all of them).
* **Query parameters.** No name or value may hold the NUL character: PostgreSQL refuses it in
  text, so it would otherwise come back from the database as a 500. And each parameter the
  operation documents is read as the OpenAPI document types it, so the parser and the document
  agree: a parameter that is not an array comes once (``?limit=1&limit=2`` is refused, not read
  as one of them), and an integer one is digits (``null``, ``true`` and ``5.0`` are refused: an
  optional parameter is left out, never sent as null). The problem names the parameter.
* **Authentication first.** A route that takes the ``tenant`` dependency checks the API key here,
  before Litestar decodes its body or query: a request without a valid key is 401 whatever it
  carries, never a 422 that tells an unauthenticated client how the route validates. (The
  dependency then finds the key in the key cache.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from litestar import Request, Response
from litestar.exceptions import MethodNotAllowedException

from app import errors
from app.api.auth import provide_tenant, refuse_if_throttled
from app.api.viewer import bearer, is_admin_token

# Routes whose last segment is ``{id}`` or ``{id}:{action}``: POST is for the actions only.
ACTION_ROUTES = frozenset({"/v1/jobs/{job_ref}", "/v1/executions/{execution_ref}"})
_ORDER = ("GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS")


def allowed_methods(path: str, route_methods: Iterable[str], *, action_route: bool) -> list[str]:
    """The methods ``path`` answers, given those of the route it matched, in a stable order."""
    methods = {m.upper() for m in route_methods} | {"OPTIONS"}
    if action_route:
        has_action = ":" in path.rstrip("/").rsplit("/", 1)[-1]
        methods = {"POST", "OPTIONS"} if has_action else methods - {"POST"}
    return sorted(methods, key=lambda m: (_ORDER.index(m) if m in _ORDER else len(_ORDER), m))


def is_action_path(path: str) -> bool:
    """Whether ``path`` (as requested) is one of ACTION_ROUTES: ``/v1/jobs/<one segment>`` and the like."""
    for template in ACTION_ROUTES:
        prefix = template.rsplit("/", 1)[0] + "/"
        rest = path.removeprefix(prefix)
        if path.startswith(prefix) and rest and "/" not in rest.rstrip("/"):
            return True
    return False


def route_methods(request: Request[Any, Any, Any]) -> frozenset[str]:
    """The methods of the route ``request`` matched (read once per app from its route table)."""
    state = request.app.state
    table: dict[str, frozenset[str]] | None = state.get(_TABLE_KEY)
    if table is None:
        table = {route.path_format: frozenset(getattr(route, "methods", ())) for route in request.app.routes}
        state[_TABLE_KEY] = table
    return table.get(request.scope.get("path_template", ""), frozenset({request.method}))


_TABLE_KEY = "guards_route_methods"
_QUERY_KEY = "guards_query_parameters"
_INTEGER = re.compile(r"-?[0-9]+")


def query_parameters(request: Request[Any, Any, Any]) -> dict[str, dict[str, Any]]:
    """The query parameters the operation of ``request`` documents (name -> schema), read once per app from
    its OpenAPI document, by operationId."""
    state = request.app.state
    table: dict[str, dict[str, dict[str, Any]]] | None = state.get(_QUERY_KEY)
    if table is None:
        document = request.app.openapi_schema.to_schema()
        table = {}
        for item in document.get("paths", {}).values():
            for operation in item.values():
                if isinstance(operation, dict) and "operationId" in operation:
                    parameters = operation.get("parameters", ())
                    table[operation["operationId"]] = {
                        p["name"]: p.get("schema", {}) for p in parameters if p.get("in") == "query"
                    }
        state[_QUERY_KEY] = table
    operation_id = getattr(request.scope.get("route_handler"), "operation_id", None)
    return table.get(operation_id, {}) if isinstance(operation_id, str) else {}


def check_query(request: Request[Any, Any, Any]) -> None:
    """Refuse (InvalidParameter) a documented query parameter given twice though it is no array, or an
    integer one that is not digits."""
    documented = query_parameters(request)
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        schema = documented.get(name)
        if schema is None:
            continue
        kind = schema.get("type")
        if name in seen and kind != "array":
            raise errors.InvalidParameter(name, "is given once (it is not a list)")
        seen.add(name)
        if kind == "integer" and not _INTEGER.fullmatch(value):
            raise errors.InvalidParameter(
                name,
                f"must be an integer written in digits, got {value[:40]!r}; leave an "
                "optional parameter out rather than sending null",
            )


async def before_request(request: Request[Any, Any, Any]) -> Response[None] | None:
    allowed = allowed_methods(
        request.url.path, route_methods(request), action_route=request.scope.get("path_template") in ACTION_ROUTES
    )
    allow = ", ".join(allowed)
    if request.method not in allowed:
        raise MethodNotAllowedException(headers={"Allow": allow})
    if request.method == "OPTIONS":
        return Response(None, status_code=204, headers={"Allow": allow})
    parameters = request.route_handler.parsed_fn_signature.parameters
    if "tenant" in parameters:
        await provide_tenant(request, request.app.state)
    elif "viewer" in parameters:  # a tenant key or the operator's admin token (app.api.viewer)
        state = request.app.state
        if is_admin_token(bearer(request), state.settings.admin_token):
            refuse_if_throttled(request, state)
        else:
            await provide_tenant(request, state)
    refuse_nul(request.query_params.multi_items())
    check_query(request)
    return None


def refuse_nul(query: Iterable[tuple[str, str]]) -> None:
    """InvalidParameter for the first query parameter whose name or value holds the NUL character."""
    for name, value in query:
        if "\x00" in name or "\x00" in value:
            raise errors.InvalidParameter(
                name.replace("\x00", "\\u0000"), "must not contain the NUL character (U+0000)"
            )
