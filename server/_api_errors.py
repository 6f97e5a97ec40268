"""How the gateway's control API (`_gateway`'s FastAPI app) answers errors: in OpenAI's error shape.

`install_error_handlers` makes every `ServerError` raised by a route (and by the admin token check) and
every request-validation failure an `{"error": {...}}` body with the right status: an `UpstreamError` is a
400 when vLLM refused the request (4xx) and a 502 when vLLM failed or is gone; a body that does not validate
is a 400 naming the first bad field. Routing's own refusals (an unknown path, a method a path does not take)
and a bug (500; the log has the traceback) are answered in the same shape. `error_response` is that answer,
for routes that answer errors themselves. Which of these each route answers is in its OpenAPI entry
(`responses=`, see `sdk.infra.error_responses`); `UPSTREAM_ERRORS` are those of every route that needs the
registry started.

Deliberately not here: the hot path's errors (`_proxy` answers them in the same shape without FastAPI) and
choosing messages (the exceptions and the routes carry them).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ._proxy import error_payload
from .errors import ServerError, UpstreamError

#: What a route that needs the registry (`registry.ready()`, vLLM reached once) may answer besides its own refusals.
UPSTREAM_ERRORS = {400: "vLLM refused an operation this request needed (its message is quoted)",
                   502: "vLLM failed the operation or cannot be reached"}


def error_response(status: int, message: str, *, param: Optional[str] = None,
                   code: Optional[str] = None) -> JSONResponse:
    """An OpenAI-shaped error answer."""
    return JSONResponse(error_payload(status, message, param=param, code=code), status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Answer `ServerError`s and invalid request bodies raised in `app` as OpenAI-shaped errors."""
    app.exception_handler(ServerError)(_server_error)
    app.exception_handler(RequestValidationError)(_validation_error)
    app.exception_handler(HTTPException)(_http_error)
    app.exception_handler(Exception)(_bug)


async def _server_error(_: Request, e: ServerError) -> JSONResponse:
    status = e.http_status
    if isinstance(e, UpstreamError):
        # vLLM refusing an adapter (4xx) is the caller's problem; vLLM failing or gone is ours.
        status = 400 if e.status is not None and 400 <= e.status < 500 else 502
    return error_response(status, e.message, code=e.code)


async def _validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
    errs = e.errors()
    first = errs[0] if errs else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    return error_response(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}", param=param,
                          code="invalid_request")


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:
    message = str(e.detail)
    if message == HTTPStatus(e.status_code).phrase:  # routing's bare "Not Found" / "Method Not Allowed"
        message = f"{message}: {request.method} {request.url.path} (the gateway's endpoints are in /openapi.json)"
    answer = error_response(e.status_code, message, code=HTTPStatus(e.status_code).phrase.lower().replace(" ", "_"))
    answer.headers.update(e.headers or {})  # 405 names the allowed methods
    return answer


async def _bug(_: Request, e: Exception) -> JSONResponse:
    # Starlette's error middleware calls this, then re-raises for the server to log the traceback.
    return error_response(500, "Internal gateway error; see the gateway log.", code="internal_error")
