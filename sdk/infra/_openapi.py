"""OpenAPI documents that say what a service really answers: one way for the gateway's and the collector's
FastAPI apps to document their error statuses and the bodies they parse themselves.

FastAPI documents a route's success answer and, for a route with parameters, a 422 with its own
`HTTPValidationError` body. Neither service answers that: every error is the OpenAI shape
(`sdk.wire.ErrorBody`), a body that does not validate is a 400 on the gateway and a 422 with `errors` on the
collector, and each route has refusals of its own (401, 404, 409, 503 ...). So:

* each route lists the statuses it answers besides its success, with why (`error_responses`);
* a route that reads its JSON body itself (the collector parses a batch once, from the raw bytes) names
  the body's model by reference (`json_body`);
* `finish_openapi(app, *body_models)` finishes the app's document: FastAPI's own 422 entries and their schemas are
  dropped, and the body models' schemas, with every schema they refer to, go into `components/schemas`, so
  every `$ref` resolves. (Embedding `model_json_schema()` whole leaves its `#/$defs/...` references pointing
  at a document root that has no `$defs`: the dangling `$defs/ToolCall` of issue 22.)

Deliberately not here: which statuses a route answers (the routes say it) and checking the document (the
schemathesis tests, tests/test_openapi_fuzz.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..wire import ErrorBody

if TYPE_CHECKING:
    from fastapi import FastAPI

#: Where an OpenAPI document keeps its named schemas.
REF = "#/components/schemas/"


def error_responses(statuses: Mapping[int, str], model: type[BaseModel] = ErrorBody) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses=` entries: each status with why it is answered and `model` as its JSON body."""
    return {status: {"model": model, "description": why} for status, why in statuses.items()}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """The `openapi_extra` of a route that reads its JSON body itself: the body is `model`, by reference
    (`finish_openapi(app, model)` adds the schemas)."""
    name, _ = _schemas(model)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": REF + name}}}}}


def finish_openapi(app: FastAPI, *body_models: type[BaseModel]) -> None:
    """Finish `app`'s OpenAPI document (see the module docstring); `body_models` are those named by `json_body`.
    Raises `ValueError` (when the document is first built) if two different schemas would share one name."""
    from fastapi import FastAPI

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = FastAPI.openapi(app)  # FastAPI's document, cached on the app: finished in place, once
        _drop_default_422(doc)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in body_models:
            for name, schema in _schemas(model)[1].items():
                if schemas.setdefault(name, schema) != schema:
                    raise ValueError(f"two schemas named {name!r} in the OpenAPI document of {app.title!r}: "
                                     f"rename one of the models (one is in {model.__name__}'s schema)")
        return doc

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customize the document


def _schemas(model: type[BaseModel]) -> tuple[str, dict[str, Any]]:
    """`model`'s component name, and every component its schema needs (itself and the models it refers to)."""
    schema = model.model_json_schema(ref_template=REF + "{model}")
    defs: dict[str, Any] = schema.pop("$defs", {})
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF) and len(schema) == 1:  # a recursive model: itself a $def
        return ref.removeprefix(REF), defs
    return model.__name__, {**defs, model.__name__: schema}


def _drop_default_422(doc: dict[str, Any]) -> None:
    """Remove the 422s FastAPI adds on its own (body `HTTPValidationError`), and that body's schemas once nothing
    refers to them."""
    default = {"$ref": REF + "HTTPValidationError"}
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema") == default:
                del responses["422"]
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # the second is referred to by the first only
        if name in schemas and f'"{REF}{name}"' not in json.dumps(doc):
            del schemas[name]
