"""The collector's HTTP API: ingest, feedback (by trajectory id or captured response id), stats, health.

`POST /v1/trajectories` reads the body under a size cap (413 past it), refuses a declared
non-JSON media type or a compressed body (415), validates it as a `TrajectoryBatch` (422 naming
the bad field, or saying the body is empty or not UTF-8; nothing stored), then anonymizes, scores
and stores the whole batch in one transaction, idempotently by trajectory id (`_ingest.py`). The
response is sent only after that transaction committed: a 200 is a durable acknowledgement, and a
crash before it leaves none of the batch. A batch over the cap is refused whole: the SDK client
does not split it, it moves it to its spool's `rejected/` directory, so clients keep batches
below the cap (the SDK's `batch_size`).

Ingest is CPU-bound: the body is parsed and validated once (pydantic, from the raw bytes), and
parsing, validation and storage run in one trip to the thread pool, so the event loop only reads
bodies and writes responses; the result goes out as the bytes pydantic serialized, without a second
validation by FastAPI's `response_model` (kept for the OpenAPI schema).

Deliberately not here: curation and export (`_export.py`), rate limiting and TLS (put a proxy in
front), and gzip request bodies (clients send batches of a few MB at most).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from sdk import Feedback, IngestResult, TrajectoryBatch

from . import _defaults
from ._store import Store, open_store
from ._settings import CollectorSettings
from .errors import StorageError, UnknownResponseError, UnknownTrajectoryError


class FeedbackResult(BaseModel):
    """Response of `POST /v1/feedback`."""

    id: int
    trajectory_id: str | None


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


def _validation_response(errors: list[Any], what: str) -> JSONResponse:
    # The submitted values ("input") are left out on purpose: they may be the very PII the
    # collector exists to keep out of logs and responses.
    items = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    summary = "; ".join(f"{_loc(tuple(e['loc']))}: {e['msg']}" for e in errors[:10])
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return JSONResponse(
        status_code=422,
        content={"detail": f"invalid {what}: {summary}{more}. Nothing was stored.", "errors": items},
    )


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
            return JSONResponse(
                status_code=422,
                content={"detail": f"invalid {what}: {reason}. Nothing was stored.",
                         "errors": [{"loc": [], "msg": reason, "type": "json_invalid"}]},
            )
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


def create_app(settings: CollectorSettings | None = None, *, store: Store | None = None,
               langfuse: Any = None) -> FastAPI:
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

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_r: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(list(exc.errors()), "request")

    @app.exception_handler(StorageError)
    async def _on_storage(_r: Request, exc: StorageError) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    def require_key(request: Request) -> None:
        if not keys:
            return
        given = request.headers.get("x-api-key", "")
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        # Constant-time comparison against every key: no timing hint about which prefix matched.
        ok = False
        for k in keys:
            ok |= hmac.compare_digest(given.encode(), k)
        if not ok:
            raise HTTPException(
                status_code=401,
                detail="missing or invalid API key: send `Authorization: Bearer <key>` (or `X-API-Key: <key>`) "
                f"with one of the keys the collector was started with ({_defaults.ENV_KEYS}, comma-separated)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    batch_schema = {"content": {"application/json": {"schema": TrajectoryBatch.model_json_schema()}}, "required": True}
    feedback_schema = {"content": {"application/json": {"schema": Feedback.model_json_schema()}}, "required": True}

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
        openapi_extra={"requestBody": batch_schema},
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
        openapi_extra={"requestBody": feedback_schema},
    )
    async def feedback(request: Request) -> Any:
        """Join late user feedback to a stored trajectory, named by its id or by a captured completion's
        `response_id` (404 if unknown)."""
        body = await read_body(request)
        try:
            fb = Feedback.model_validate_json(body)
        except ValidationError as e:
            return _parse_error(body, e, "feedback")
        try:
            if fb.trajectory_id is None:  # resolved here too, for the response; add_feedback re-checks
                assert fb.response_id is not None
                tid = await run_in_threadpool(the_store.resolve_response, fb.response_id)
                if tid is None:
                    raise UnknownResponseError(fb.response_id)
                fb = Feedback(trajectory_id=tid, rating=fb.rating, correction=fb.correction, text=fb.text,
                              key_id=fb.key_id)
            fid = await run_in_threadpool(the_store.add_feedback, fb)
        except (UnknownTrajectoryError, UnknownResponseError) as e:
            raise HTTPException(status_code=404, detail=str(e)) from e
        return FeedbackResult(id=fid, trajectory_id=fb.trajectory_id)

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        """Counts overall, per app and per served version."""
        return (await run_in_threadpool(the_store.stats)).to_dict()

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 when the database answers, 503 otherwise."""

        def ping() -> None:
            with the_store.engine.connect() as conn:
                conn.execute(sa.select(1))

        try:
            await run_in_threadpool(ping)
        except sa.exc.SQLAlchemyError as e:
            return JSONResponse(status_code=503, content={"status": "unavailable", "detail": f"database: {e}"})
        return JSONResponse({"status": "ok", "database": the_store.dialect})

    from ._dashboard import dashboard_router

    app.include_router(dashboard_router(settings, the_store, langfuse))
    return app
