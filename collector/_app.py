"""The collector's HTTP API: ingest, feedback (by trajectory id or captured response id), stats, health.

`POST /v1/trajectories` reads the body under a size cap (413 past it), refuses a declared
non-JSON media type or a compressed body (415), validates it as a `TrajectoryBatch` (422 naming
the bad field, or saying the body is empty or not UTF-8; nothing stored), then anonymizes, scores
and stores the whole batch in one transaction, idempotently by trajectory id (`_ingest.py`). The
response is sent only after that transaction committed: a 200 is a durable acknowledgement, and a
crash before it leaves none of the batch. A full disk is a 507 (`insufficient_storage`), any other
database failure a 503; the transaction is rolled back whole, and the SDK spools the batch and sends it
again later. A batch over the cap is refused whole: the SDK client
does not split it, it moves it to its spool's `rejected/` directory, so clients keep batches
below the cap (the SDK's `batch_size`).

Every error, whatever raised it (a refusal here or in the dashboard's routes, request validation, a
collector error, an unexpected exception), is answered in the OpenAI error shape (`sdk.wire.error_body`),
so one client-side parser reads the gateway and the collector alike; a 422 also lists every invalid
field under `errors` (location, message, type; never the submitted value). The OpenAPI document (`/openapi.json`,
`/docs`) lists every status each route answers, with these bodies (`sdk.infra.finish_openapi`).

Ingest is CPU-bound: the body is parsed and validated once (pydantic, from the raw bytes), and
parsing, validation and storage run in one trip to the thread pool, so the event loop only reads
bodies and writes responses; the result goes out as the bytes pydantic serialized, without a second
validation by FastAPI's `response_model` (kept for the OpenAPI schema).

Deliberately not here: curation and export (`_export.py`), rate limiting and TLS (put a proxy in
front), and gzip request bodies (clients send batches of a few MB at most).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from sdk import Feedback, IngestResult, TrajectoryBatch, wire
from sdk.infra import error_responses, finish_openapi, json_body

from . import _defaults
from ._store import Store, open_store
from ._settings import CollectorSettings
from .errors import StorageError, StorageFullError, UnknownResponseError, UnknownTrajectoryError

if TYPE_CHECKING:
    from ._langfuse import LangfuseExporter

#: The error `code` of an `HTTPException`'s answer, by status (the collector's own errors name their own).
_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               413: "request_too_large", 415: "unsupported_media_type", 503: "unavailable"}


class FeedbackResult(BaseModel):
    """Response of `POST /v1/feedback`."""

    id: int
    trajectory_id: str


class FieldError(BaseModel):
    """One invalid field of a 422 (`ValidationErrorBody.errors`); never the submitted value."""

    loc: list[str | int] = Field(description="where: the path of keys and indexes into the body (empty: the whole body)")
    msg: str
    type: str = Field(description="pydantic's error type, e.g. `missing`, `json_invalid`")


class ValidationErrorBody(wire.ErrorBody):
    """A 422: the OpenAI error shape, and every invalid field."""

    errors: list[FieldError]


#: What the two write routes answer besides 200 (a refusal by a route, by its key check or by its body reader).
_WRITE_ERRORS = error_responses({
    401: "API keys are configured and the request has none of them (unauthorized)",
    413: "the body is over the size cap (request_too_large): send smaller batches",
    415: "the body is declared as something other than UTF-8 JSON, or compressed (unsupported_media_type)",
    503: "the database failed; nothing was stored (storage_unavailable)",
    507: "the database's disk is full; nothing was stored (insufficient_storage): send again once space is freed",
}) | error_responses({422: "the body is empty, not UTF-8 JSON, or does not validate (invalid_body); nothing was "
                            "stored"}, ValidationErrorBody)


def _error(http_status: int, message: str, *, code: str, param: str | None = None,
           headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    """An error answer in the OpenAI shape (`sdk.wire.error_body`); `extra` goes next to `error`."""
    body = {**wire.error_body(http_status, message, code=code, param=param), **extra}
    return JSONResponse(status_code=http_status, content=body, headers=headers)


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


def _validation_response(errors: list[Any], what: str) -> JSONResponse:
    # The submitted values ("input") are left out on purpose: they may be the very PII the
    # collector exists to keep out of logs and responses.
    items = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    summary = "; ".join(f"{_loc(tuple(e['loc']))}: {e['msg']}" for e in errors[:10])
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    param = _loc(tuple(errors[0]["loc"])) if errors else None
    return _error(422, f"invalid {what}: {summary}{more}. Nothing was stored.", code="invalid_body", param=param,
                  errors=items)


def _check_media(request: Request) -> None:
    """415 for a body declared as something other than JSON, or compressed: the collector would
    otherwise fail later with a confusing JSON error. No Content-Type at all is accepted (curl)."""
    ctype = request.headers.get("content-type")
    if ctype is not None:
        media, _, params = ctype.partition(";")
        media = media.strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise HTTPException(
                status_code=415,
                detail=f"Content-Type {media or ctype!r} is not accepted: send the body as JSON with "
                "`Content-Type: application/json`",
            )
        fields = dict(kv.strip().lower().partition("=")[::2] for kv in params.split(";") if "=" in kv)
        charset = fields.get("charset", "utf-8").strip('"')
        if charset not in ("utf-8", "utf8"):
            raise HTTPException(status_code=415, detail=f"charset {charset!r} is not accepted: JSON bodies must be UTF-8")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise HTTPException(
            status_code=415,
            detail=f"Content-Encoding {encoding!r} is not supported: send the body uncompressed "
            "(batches are at most a few MB)",
        )


def _parse_error(body: bytes, e: ValidationError, what: str) -> JSONResponse:
    """422 for a body that did not validate, with a plain reason when it is not JSON at all."""
    errors = e.errors()
    if errors and errors[0]["type"] == "json_invalid":
        reason = None
        if not body.strip():
            reason = "request body is empty"
        else:
            try:
                body.decode("utf-8")  # only on this error path: no cost for valid bodies
            except UnicodeDecodeError as u:
                reason = f"request body is not valid UTF-8 (byte {u.start}: {u.reason}); JSON must be UTF-8 encoded"
        if reason is not None:
            return _error(422, f"invalid {what}: {reason}. Nothing was stored.", code="invalid_body",
                          errors=[{"loc": [], "msg": reason, "type": "json_invalid"}])
    return _validation_response(errors, what)


async def _read_capped(request: Request, cap: int) -> bytes:
    too_big = HTTPException(
        status_code=413,
        detail=f"request body exceeds the collector's limit of {cap} bytes: send smaller batches "
        "(a lower batch_size in the SDK's CollectorClient) or raise CollectorSettings.max_body_bytes",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    # Counted while streaming too: a chunked body has no Content-Length to check up front.
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _answer_errors(app: FastAPI) -> None:
    """Answer every error in the OpenAI shape (see the module docstring): `HTTPException`s (the routes' own
    refusals and Starlette's 404/405), request validation (422), the collector's errors, and anything
    unexpected (500; the server logs the traceback)."""

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code in (404, 405) and message == HTTPStatus(exc.status_code).phrase:  # routing's bare "Not Found"
            message = f"{message}: {request.method} {request.url.path}; the collector's endpoints are listed at /docs"
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return _error(exc.status_code, message, code=code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_r: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(list(exc.errors()), "request")

    @app.exception_handler(UnknownTrajectoryError)
    async def _on_unknown_trajectory(_r: Request, exc: UnknownTrajectoryError) -> JSONResponse:
        return _error(404, str(exc), code="trajectory_not_found", param="trajectory_id")

    @app.exception_handler(UnknownResponseError)
    async def _on_unknown_response(_r: Request, exc: UnknownResponseError) -> JSONResponse:
        return _error(404, str(exc), code="response_not_found", param="response_id")

    @app.exception_handler(StorageError)
    async def _on_storage(_r: Request, exc: StorageError) -> JSONResponse:
        if isinstance(exc, StorageFullError):  # the SDK spools on any 5xx and sends again later
            return _error(507, str(exc), code="insufficient_storage")
        return _error(503, str(exc), code="storage_unavailable")

    @app.exception_handler(Exception)
    async def _on_bug(_r: Request, _exc: Exception) -> JSONResponse:
        return _error(500, "internal collector error; the collector's log has the traceback", code="internal_error")


def create_app(settings: CollectorSettings | None = None, *, store: Store | None = None,
               langfuse: LangfuseExporter | None = None) -> FastAPI:
    """The collector's FastAPI app. Opens (and migrates) the store now unless one is given.

    Args:
        settings: configuration; `CollectorSettings.from_env()` when None.
        store: an already open store to use instead of opening `settings.db_url` (the app then
            does not close it on shutdown).
        langfuse: a `LangfuseExporter` to export with (default: one made from `settings.langfuse`, if set).
    """
    settings = settings or CollectorSettings.from_env()
    owns_store = store is None
    # preload: the name model is loaded (or trained once) now, not on the first request.
    the_store = store if store is not None else open_store(
        settings.db_url, anonymizer=settings.make_anonymizer(preload=True))
    keys = tuple(k.encode() for k in settings.api_keys)
    if langfuse is None and settings.langfuse is not None:
        from ._langfuse import LangfuseExporter

        langfuse = LangfuseExporter(settings.langfuse)
    if langfuse is not None:
        langfuse.attach(the_store)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if langfuse is not None:
            langfuse.start()
        yield
        if langfuse is not None:
            await run_in_threadpool(langfuse.close)
        if owns_store:
            the_store.close()

    app = FastAPI(title="looplift collector", version="1", lifespan=lifespan)
    app.state.store = the_store
    app.state.settings = settings
    app.state.langfuse = langfuse

    _answer_errors(app)

    def require_key(request: Request) -> None:
        if not keys:
            return
        given = (wire.bearer_token(request.headers.get("authorization"))
                 or request.headers.get(wire.API_KEY_HEADER, ""))
        # Constant-time comparison against every key: no timing hint about which prefix matched.
        ok = False
        for k in keys:
            ok |= hmac.compare_digest(given.encode(), k)
        if not ok:
            raise HTTPException(
                status_code=401,
                detail=f"missing or invalid API key: send `Authorization: Bearer <key>` (or `{wire.API_KEY_HEADER}: <key>`) "
                f"with one of the keys the collector was started with ({_defaults.ENV_KEYS}, comma-separated)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def read_body(request: Request) -> bytes:
        """The raw request body: 415 for a non-JSON media type, 413 past the size cap."""
        _check_media(request)
        return await _read_capped(request, settings.max_body_bytes)

    def ingest_body(body: bytes) -> Response:
        """Parse, validate and store one batch (in a pool thread): 422 when it does not validate."""
        try:
            batch = TrajectoryBatch.model_validate_json(body)
        except ValidationError as e:
            return _parse_error(body, e, "trajectory batch")
        result = the_store.add_trajectories(batch.trajectories)
        return Response(result.model_dump_json(), media_type="application/json")

    @app.post(
        "/v1/trajectories",
        response_model=IngestResult,
        dependencies=[Depends(require_key)],
        openapi_extra=json_body(TrajectoryBatch),
        responses=_WRITE_ERRORS,
    )
    async def ingest(request: Request) -> Response:
        """Anonymize, score and store a batch of trajectories (idempotent by id)."""
        body = await read_body(request)
        # Awaited to the end: the 200 leaves only after the batch's transaction committed.
        return await run_in_threadpool(ingest_body, body)

    @app.post(
        "/v1/feedback",
        response_model=FeedbackResult,
        dependencies=[Depends(require_key)],
        openapi_extra=json_body(Feedback),
        responses=_WRITE_ERRORS | error_responses({404: "no stored trajectory has that trajectory id "
                                                        "(trajectory_not_found) or response id (response_not_found)"}),
    )
    async def feedback(request: Request) -> Any:
        """Join late user feedback to a stored trajectory, named by its id or by a captured completion's
        `response_id` (404 if unknown; 422 naming the problem when the body names neither or both)."""
        body = await read_body(request)
        try:
            fb = Feedback.model_validate_json(body)  # checks that exactly one of the two ids is given
        except ValidationError as e:
            return _parse_error(body, e, "feedback")
        # The store resolves a response id (once, in the insert's transaction); unknown ids raise -> 404.
        fid, tid = await run_in_threadpool(the_store.add_feedback, fb)
        return FeedbackResult(id=fid, trajectory_id=tid)

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        """Counts overall, per app and per served version."""
        return (await run_in_threadpool(the_store.stats)).to_dict()

    @app.get("/health", responses=error_responses({503: "the database does not answer (database_unavailable)"}))
    async def health() -> JSONResponse:
        """200 when the database answers, 503 otherwise."""

        def ping() -> None:
            with the_store.engine.connect() as conn:
                conn.execute(sa.select(1))

        try:
            await run_in_threadpool(ping)
        except sa.exc.SQLAlchemyError as e:
            return _error(503, f"database: {e}", code="database_unavailable", status="unavailable")
        return JSONResponse({"status": "ok", "database": the_store.dialect})

    from ._dashboard import dashboard_router

    app.include_router(dashboard_router(settings, the_store, langfuse))
    finish_openapi(app, TrajectoryBatch, Feedback)
    return app
