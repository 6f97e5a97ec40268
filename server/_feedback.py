"""`POST /v1/feedback` on the gateway: feedback by the id the client already has, the completion's `id`.

    {"response_id": "chatcmpl-...", "rating": -1..1, "correction": "...", "text": "..."}

A black-box app has no trajectory id, but every chat completion it received carries an `id`; the
gateway's capture records those ids in the trajectory (`metadata.response_ids`) and the collector links
them (`collector._capture_rows`). So the gateway forwards the feedback to the collector's
`POST /v1/feedback` with the `response_id` and the id of the API key that sent it, and the collector joins
it to the captured trajectory and recomposes its score (late feedback, days later, works the same).

A completion captured a moment ago may still be in the capture queue or the collector client's batch; the
gateway delivers what is pending first (at most `FLUSH_S`), so feedback sent right after the answer finds
its trajectory. Answers: 200 `{"id", "trajectory_id", "response_id"}`; 404 when no captured exchange has
that id (the message says why that happens); 400 for a bad body; 401 without a valid key when keys are
configured; 503 when no collector is configured or it cannot be reached (retry later).

Deliberately not here: feedback by trajectory id (the collector's own API takes it) and spooling feedback
while the collector is down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from sdk import wire
from sdk.infra import error_responses

from . import _defaults as D
from ._collector_link import CollectorUnavailable

if TYPE_CHECKING:
    from ._gateway import Gateway

#: Seconds the gateway waits for pending captures to reach the collector before forwarding feedback.
FLUSH_S = 10.0


class FeedbackRequest(BaseModel):
    """The body of the gateway's `POST /v1/feedback`."""

    model_config = ConfigDict(extra="forbid")

    response_id: str = Field(min_length=1, max_length=256, description="the `id` of the chat completion")
    rating: Optional[float] = Field(default=None, ge=-1.0, le=1.0, description="-1 (bad) .. 1 (good)")
    correction: Optional[str] = Field(default=None, description="what the answer should have been")
    text: Optional[str] = Field(default=None, description="free-text feedback")


class FeedbackAnswer(BaseModel):
    """The answer of the gateway's `POST /v1/feedback`: the stored feedback and the trajectory it joined."""

    id: int
    trajectory_id: str
    response_id: str


#: What the route answers besides 200 (the module docstring says when).
_ERRORS = {400: "the body does not validate or names none of rating, correction and text, or the collector "
                "refused the feedback",
           401: "API keys are configured and the request has none of them (invalid_api_key)",
           404: "no captured exchange has that response id (response_not_found)",
           503: "no collector is configured, or it cannot be reached; retry later (collector_unavailable)"}


def _error(status: int, message: str, code: str, param: Optional[str] = None) -> JSONResponse:
    return JSONResponse(wire.error_body(status, message, param=param, code=code), status_code=status)


def feedback_router(gw: "Gateway") -> APIRouter:
    """The route, reading the gateway's keys, capture and collector link at request time."""
    router = APIRouter()

    @router.post("/v1/feedback", response_model=FeedbackAnswer, responses=error_responses(_ERRORS))
    async def feedback(req: FeedbackRequest, request: Request) -> Any:
        """Join feedback to the captured trajectory holding the completion `response_id`."""
        key_id = None
        if gw.keys:
            key_id = gw.keys.match(request.headers.get("authorization"))
            if key_id is None:
                return _error(401, "Incorrect or missing API key: feedback is training data, so with API keys "
                              f"configured it needs 'Authorization: Bearer <key>' with one of the keys in "
                              f"${D.API_KEYS_ENV}.", "invalid_api_key")
        if req.rating is None and req.correction is None and req.text is None:
            return _error(400, "Feedback needs at least one of 'rating' (-1..1), 'correction' or 'text'.",
                          "invalid_request", "rating")
        link = gw.collector_link
        if link is None:
            return _error(503, "Feedback needs the collector, and this gateway has none configured: start it with "
                          "`looplift up`, or give `looplift server start` --collector-url.", "collector_unavailable")
        if gw.capture is not None:  # the completion may still be on its way to the collector
            await run_in_threadpool(gw.capture.flush, FLUSH_S)
        body = {"response_id": req.response_id, "rating": req.rating, "correction": req.correction, "text": req.text,
                "key_id": key_id}
        try:
            r = await link.feedback(body)
        except CollectorUnavailable as e:
            return _error(503, f"Feedback could not be stored: {e}; retry later.", "collector_unavailable")
        if r.status_code == 404:
            return _error(404, f"No captured exchange has response id {req.response_id!r}: feedback by response id "
                          "joins completions the gateway captured, so capture must have been on for that request "
                          "(`looplift up --capture`, or a capture API key), and the id must be the chat completion's "
                          "`id` exactly as the client received it.", "response_not_found", "response_id")
        if r.status_code != 200:
            json_body = r.headers.get("content-type", "").startswith("application/json")
            reason = (wire.error_message(r.json()) if json_body else None) or r.text[:500]
            return _error(400, f"The collector refused the feedback: {reason}", "invalid_request")
        stored = r.json()
        return {"id": stored["id"], "trajectory_id": stored["trajectory_id"], "response_id": req.response_id}

    return router
