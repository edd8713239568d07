"""The server's JSON API described: each route an :class:`Endpoint` with its parameters
(:class:`Param`), and the OpenAPI document made from the route table (``/api/openapi.json``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from .. import __version__
from ..store import Store


@dataclass(frozen=True)
class Param:
    name: str
    kind: str = "string"  # "string", "integer", "number", "boolean"
    help: str = ""
    where: str = "query"


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    summary: str
    handler: Callable[[Request, Store], Awaitable[Any]]
    params: tuple[Param, ...] = ()
    body: str | None = None  # what the JSON body holds
    stream: bool = False  # answers with Server-Sent Events
    tags: tuple[str, ...] = field(default=("jobs",))


ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": {"type": "string", "description": "ValidationException, ResourceNotFound, ..."},
                   "message": {"type": "string"}}}}}


def document(routes: Iterable[Endpoint]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in routes:
        operation: dict[str, Any] = {
            "summary": endpoint.summary, "tags": list(endpoint.tags),
            "operationId": endpoint.handler.__name__,
            "parameters": [{"name": p.name, "in": p.where, "required": p.where == "path",
                            "description": p.help, "schema": {"type": p.kind}} for p in endpoint.params],
            "responses": {
                "200": {"description": "Server-Sent Events" if endpoint.stream else "the answer",
                        "content": {"text/event-stream" if endpoint.stream else "application/json": {
                            "schema": {"type": "string"} if endpoint.stream else {"type": "object"}}}},
                "default": {"description": "an error, in the one shape every error has",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        }
        if endpoint.body:
            operation["requestBody"] = {"description": endpoint.body, "required": True,
                                        "content": {"application/json": {"schema": {"type": "object"}}}}
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    paths["/metrics"] = {"get": {"summary": "Prometheus exposition of running jobs", "tags": ["metrics"],
                                 "operationId": "metrics",
                                 "responses": {"200": {"description": "text format 0.0.4",
                                                       "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "trainmon", "version": __version__,
                 "description": "trainmon's JSON API: jobs, metrics, logs and live updates. Every request needs "
                                "the access token (Authorization: Bearer) or a console session."},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR},
                       "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
        "security": [{"token": []}],
    }
