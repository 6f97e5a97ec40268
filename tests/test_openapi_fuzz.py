"""The HTTP APIs under schemathesis (issue 22): the gateway (its `/v1` routes and every `/admin/*` route, with the
admin token) and the collector (ingest, feedback, stats, health, the dashboard's data), each fuzzed from its own
OpenAPI document over real loopback HTTP.

Three checks on every answer: no 5xx (`not_a_server_error`), no status the document does not list for the route
(`status_code_conformance`), and the body matches the schema documented for that status
(`response_schema_conformance`). The stack is the real one wired as `looplift up` wires it: the gateway over
`FakeVLLM` (tests/test_server_proxy.py's fake vLLM, the one part that is not real: faked at its HTTP API), with a
served and a loaded version so promote, rollback and the canary meet real state, and connected to a collector on
a temporary SQLite database whose dashboard reads that gateway. Bounded and reproducible: a fixed seed,
derandomized generation, `MAX_EXAMPLES` fuzzed cases per operation on top of schemathesis's example and
coverage cases (the coverage cases probe every documented bound: a 4096-character adapter path found the
gateway's 500 on a file name too long), no example database. The whole file takes about a minute on two
busy cores, a third of it the collector's one-time name-model training, which a full session pays once anyway.

Left out, on purpose: `POST /v1/chat/completions` and `/v1/completions` are not in the gateway's document (their
bodies are vLLM's; tests/test_server_proxy.py covers them), and the checks that need a model of the
resources (stateful links, `use_after_free`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from _adapters import write_adapter
from collector import CollectorSettings, create_app, open_store, serve_in_thread
from sdk.infra import ServerThread, start_server_thread
from server import AdminClient, GatewayHandle, GatewaySettings, create_gateway, start_gateway_in_thread
from test_server_proxy import FakeVLLM

ADMIN = "fuzz-admin-token"
KEY = "fuzz-ingest-key"
#: Fuzzed cases per operation (schemathesis adds its example and coverage cases to these).
MAX_EXAMPLES = 10
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
CONFIG = {"seed": 22, "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"}}


def _documents() -> dict[str, dict[str, Any]]:
    """Both apps' OpenAPI documents, built in-process (the documents need neither vLLM nor a database on disk)."""
    gw = create_gateway(GatewaySettings(admin_token=ADMIN, state_dir=Path("/nonexistent/looplift-state")),
                        "http://127.0.0.1:9")
    store = open_store("sqlite://")
    try:
        return {"gateway": gw.api.openapi(), "collector": create_app(CollectorSettings(), store=store).openapi()}
    finally:
        store.close()


#: Built at collection: schemathesis makes one test per operation of each (its lazy `from_fixture` does not run
#: under pytest 9.2, whose items have no `_nodeid` to rename). The fuzzed servers serve these same documents.
DOCUMENTS = _documents()
gateway_api = schemathesis.openapi.from_dict(DOCUMENTS["gateway"], config=schemathesis.Config.from_dict(CONFIG))
collector_api = schemathesis.openapi.from_dict(DOCUMENTS["collector"], config=schemathesis.Config.from_dict(CONFIG))


@dataclass
class Stack:
    """The running services: the gateway (over the fake vLLM) and the collector it is connected to."""

    gateway: GatewayHandle
    collector: ServerThread


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("fuzz")
    fake = FakeVLLM()
    with start_server_thread(fake.app, "127.0.0.1", 0, name="fake-vllm", log_level="critical") as vllm, \
            start_gateway_in_thread(GatewaySettings(admin_token=ADMIN, state_dir=tmp / "state"), vllm.url,
                                    port=0) as gw, \
            serve_in_thread(CollectorSettings(db_url=f"sqlite:///{tmp / 'collector.db'}", api_keys=(KEY,),
                                              admin_token=SecretStr(ADMIN), gateway_url=gw.url)) as col:
        gw.app.connect_collector(col.url, KEY)
        with AdminClient(gw.url, ADMIN) as admin:
            admin.promote(admin.load(str(write_adapter(tmp / "a1"))).name)
            admin.load(str(write_adapter(tmp / "a2")))
        assert [httpx.get(f"{s.url}/openapi.json").json() for s in (gw, col)] == [DOCUMENTS["gateway"],
                                                                                  DOCUMENTS["collector"]]
        yield Stack(gw, col)


@pytest.mark.slow
@gateway_api.parametrize()
def test_gateway_answers_only_what_its_openapi_documents(case: schemathesis.Case, stack: Stack) -> None:
    case.call_and_validate(base_url=stack.gateway.url, headers={"Authorization": f"Bearer {ADMIN}"}, checks=CHECKS)


@pytest.mark.slow
@collector_api.parametrize()
def test_collector_answers_only_what_its_openapi_documents(case: schemathesis.Case, stack: Stack) -> None:
    # The dashboard's data takes the admin token; ingest and feedback the ingest key.
    token = ADMIN if case.path.startswith("/v1/dashboard/") else KEY
    case.call_and_validate(base_url=stack.collector.url, headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)


# ---- the documents themselves -------------------------------------------------------------------------------
def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _resolves(doc: dict[str, Any], ref: str) -> bool:
    node: object = doc
    for part in ref.removeprefix("#/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("app", sorted(DOCUMENTS))
def test_every_ref_in_the_openapi_document_resolves(app: str) -> None:
    """Catches a pydantic schema embedded whole (`model_json_schema()` in `openapi_extra`) without its `$defs`
    moved into the components: the collector's ingest body then refers to `#/$defs/ToolCall`, which no document
    root has (issue 22)."""
    doc = DOCUMENTS[app]
    refs = set(_refs(doc))
    assert refs and all(r.startswith("#/") for r in refs), refs
    assert sorted(r for r in refs if not _resolves(doc, r)) == []
    assert "$defs" not in json.dumps(doc)


def test_the_gateway_documents_its_400_not_fastapis_422() -> None:
    """The gateway answers a body that does not validate with 400 (OpenAI's status, `_api_errors`): a document
    that kept FastAPI's default 422 on those routes would promise an answer that never comes."""
    doc = DOCUMENTS["gateway"]
    statuses = {(m, p): set(op["responses"]) for p, ops in doc["paths"].items() for m, op in ops.items()}
    assert [k for k, s in statuses.items() if "422" in s] == []
    assert all("400" in statuses[("post", p)] for p in ("/v1/feedback", "/admin/versions", "/admin/promote",
                                                        "/admin/canary", "/admin/canary/decision"))


def test_the_gateway_documents_every_status_of_unloading_a_version() -> None:
    """Mutant: `DELETE /admin/versions/{name}` without its `responses=` (its 404 and 409 undocumented: an OpenAPI
    client would not expect the answers it gets)."""
    op = DOCUMENTS["gateway"]["paths"]["/admin/versions/{name}"]["delete"]
    assert {"200", "400", "401", "404", "409", "502"} <= set(op["responses"])
