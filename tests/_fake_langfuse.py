"""A stand-in for the Langfuse server at its HTTP API, for the Langfuse export tests: the one part that cannot
run here. It records what the real SDK sends — OTLP trace exports (protobuf, gzip or not), scores, datasets and
dataset items — and answers like Langfuse does, so the SDK's own code paths run unchanged."""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response


@dataclass
class Received:
    """Everything the fake server got; `spans` are decoded OTLP spans as dicts."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    scores: list[dict[str, Any]] = field(default_factory=list)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    auth: set[str] = field(default_factory=set)
    raw: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def text(self) -> str:
        """Every body received, decoded, as one string (to look for text that must not leave the machine)."""
        with self.lock:
            return "\n".join(b.decode("utf-8", "replace") for b in self.raw)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def fake_langfuse() -> tuple[FastAPI, Received]:
    """The app and what it records."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    got = Received()
    app = FastAPI()

    async def body(request: Request) -> bytes:
        data = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            data = gzip.decompress(data)
        with got.lock:
            got.auth.add(request.headers.get("authorization", ""))
        return data

    @app.post("/api/public/otel/v1/traces")
    async def traces(request: Request) -> Response:
        req = ExportTraceServiceRequest.FromString(await body(request))
        with got.lock:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        attrs = {a.key: _value(a.value) for a in s.attributes}
                        got.spans.append({"name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                                          "parent": s.parent_span_id.hex(), "start": s.start_time_unix_nano,
                                          "end": s.end_time_unix_nano, "scope": ss.scope.name, "attributes": attrs})
                        got.raw.append(json.dumps(attrs).encode())
        return Response(status_code=200)

    async def take(request: Request, into: list[dict[str, Any]]) -> Any:
        """The JSON body, recorded raw (for text searches) and as parsed items under `into`."""
        data = await body(request)
        parsed = json.loads(data)
        items = parsed.get("batch", parsed) if isinstance(parsed, dict) and "batch" in parsed else parsed
        with got.lock:
            got.raw.append(data)
            into.extend(items if isinstance(items, list) else [items])
        return parsed

    @app.post("/api/public/scores")
    async def scores(request: Request) -> JSONResponse:
        await take(request, got.scores)
        return JSONResponse({"successes": [], "errors": []})

    @app.post("/api/public/ingestion")  # older SDKs send scores as ingestion events
    async def ingestion(request: Request) -> JSONResponse:
        events: list[dict[str, Any]] = []
        await take(request, events)
        with got.lock:
            got.scores.extend(e["body"] for e in events if e.get("type") == "score-create")
        return JSONResponse({"successes": [], "errors": []}, status_code=207)

    @app.post("/api/public/v2/datasets")
    async def datasets(request: Request) -> JSONResponse:
        d = await take(request, got.datasets)
        return JSONResponse({"id": "ds-" + d["name"], "name": d["name"], "description": d.get("description"),
                             "metadata": d.get("metadata"), "projectId": "p", "createdAt": _now(), "updatedAt": _now()})

    @app.post("/api/public/dataset-items")
    async def items(request: Request) -> JSONResponse:
        d = await take(request, got.items)
        return JSONResponse({"id": d.get("id") or "x", "status": "ACTIVE", "input": d.get("input"),
                             "expectedOutput": d.get("expectedOutput"), "metadata": d.get("metadata"),
                             "sourceTraceId": d.get("sourceTraceId"), "datasetId": "ds-" + d["datasetName"],
                             "datasetName": d["datasetName"], "mediaReferences": [], "createdAt": _now(),
                             "updatedAt": _now()})

    return app, got
