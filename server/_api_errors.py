"""How the gateway's control API (`_gateway`'s FastAPI app) answers errors: in OpenAI's error shape.

`install_error_handlers` makes every `ServerError` raised by a route (and by the admin token check) and
every request-validation failure an `{"error": {...}}` body with the right status: an `UpstreamError` is a
400 when vLLM refused the request (4xx) and a 502 when vLLM failed or is gone; a body that does not validate
is a 400 naming the first bad field. `error_response` is that answer, for routes that answer errors
themselves.

Deliberately not here: the hot path's errors (`_proxy` answers them in the same shape without FastAPI) and
choosing messages (the exceptions and the routes carry them).
"""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ._proxy import error_payload
from .errors import ServerError, UpstreamError


def error_response(status: int, message: str, *, param: Optional[str] = None,
                   code: Optional[str] = None) -> JSONResponse:
    """An OpenAI-shaped error answer."""
    return JSONResponse(error_payload(status, message, param=param, code=code), status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Answer `ServerError`s and invalid request bodies raised in `app` as OpenAI-shaped errors."""
    app.exception_handler(ServerError)(_server_error)
    app.exception_handler(RequestValidationError)(_validation_error)


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
