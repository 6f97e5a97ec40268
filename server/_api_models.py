"""`GET /v1/models` and `GET /v1/models/{id}` on the gateway: the alias and every loaded version, in OpenAI's
list format, so that OpenAI clients (`models.list`, `models.retrieve`) work unchanged.

A card's `root` names the version the id answers with (for the alias: the serving version). With API keys
configured these need one (401 otherwise, as on the hot path); while vLLM cannot be reached yet they answer
503 (the registry starts at the first request that finds vLLM up).

Deliberately not here: the completion endpoints (`_proxy`, served without FastAPI) and anything about
versions that are registered but not loaded (`GET /admin/versions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from openai.types import Model
from pydantic import BaseModel, Field

from sdk.infra import error_responses

from ._api_errors import error_response
from ._proxy import api_key_denied
from .errors import ServerError

if TYPE_CHECKING:
    from ._gateway import Gateway


#: What both routes may answer besides their success.
_ERRORS = {401: "API keys are configured and the request has none of them (invalid_api_key)",
           503: "vLLM cannot be reached yet (upstream_unavailable)"}


class ModelCard(Model):
    """One model as OpenAI's `models.retrieve` returns it, and the version it answers with."""

    root: str = Field(description="the version this id answers with (for the alias: the serving version)")


class ModelList(BaseModel):
    """`GET /v1/models`: OpenAI's list format."""

    object: Literal["list"]
    data: list[ModelCard]


def models_router(gw: Gateway) -> APIRouter:
    """The two routes, reading the gateway's keys and registry at request time."""
    router = APIRouter()

    @router.get("/v1/models", responses={200: {"model": ModelList}, **error_responses(_ERRORS)})
    async def models(request: Request) -> Response:
        """The alias and every loaded version, in OpenAI list format."""
        denied = await _models_ready(gw, request)
        if denied is not None:
            return denied
        return JSONResponse({"object": "list", "data": [_card(gw, mid) for mid in gw.registry.model_ids()]})

    @router.get("/v1/models/{model_id:path}", responses={200: {"model": ModelCard}, **error_responses(
        {**_ERRORS, 404: "no loaded model has that id (model_not_found)"})})
    async def model(model_id: str, request: Request) -> Response:
        """One model (the alias or a loaded version), as OpenAI's `models.retrieve` expects it."""
        denied = await _models_ready(gw, request)
        if denied is not None:
            return denied
        ids = gw.registry.model_ids()
        if model_id not in ids:
            return error_response(404, f"The model '{model_id}' does not exist or is not loaded. Available: "
                                  f"{', '.join(ids)}.", param="model", code="model_not_found")
        return JSONResponse(_card(gw, model_id))

    return router


async def _models_ready(gw: Gateway, request: Request) -> Optional[JSONResponse]:
    """None when the caller may list models and the registry is up; else the error answer."""
    if gw.keys and gw.keys.match(request.headers.get("authorization")) is None:
        return JSONResponse(api_key_denied(), status_code=401)
    try:
        await gw.registry.ready()
    except ServerError as e:
        return error_response(503, f"The gateway cannot reach vLLM yet: {e.message}", code="upstream_unavailable")
    return None


def _card(gw: Gateway, mid: str) -> dict[str, object]:
    v = gw.registry.resolve(mid)
    return ModelCard(id=mid, object="model", created=int(v.created_at.timestamp()), owned_by="looplift",
                     root=v.name).model_dump()
