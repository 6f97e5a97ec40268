"""deploy/: the Kubernetes manifests against the Kubernetes 1.37 schemas (`kubernetes-validate`, strict: an
unknown field is an error), the docker-compose file against the Compose Specification schema (vendored in
tests/data with its license), what they reference (secrets and their keys, volumes, config maps, service
selectors and named ports, images, probes on /health), the looplift commands and flags they run (each
flag must be one the command takes), and the gateway started the way the manifests start it: over a vLLM
it did not start (`looplift server start --upstream URL`, real vLLM CPU)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted(K8S.glob("*.yaml")) if p.name != "kustomization.yaml" for d in _docs(p)]


def _pod_specs() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(kind/name, pod template metadata, pod spec) of every workload."""
    for _, d in _manifests():
        spec = d.get("spec", {})
        if d["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            yield f"{d['kind']}/{d['metadata']['name']}", spec["template"].get("metadata", {}), spec["template"]["spec"]


@pytest.mark.slow
def test_every_kubernetes_manifest_is_valid_against_the_1_37_schemas() -> None:
    import jsonschema
    import kubernetes_validate

    found = _manifests()
    kinds = {d["kind"] for _, d in found}
    assert {"Deployment", "StatefulSet", "Service", "CronJob", "PersistentVolumeClaim", "Secret"} <= kinds
    for name, doc in found:
        try:
            kubernetes_validate.validate(doc, "1.37", strict=True)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as e:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_the_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    kust = _docs(K8S / "kustomization.yaml")[0]
    listed = set(kust["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    images = {i["name"] for i in kust["images"]}
    used = {c["image"].split(":")[0] for _, _, pod in _pod_specs() for c in pod["containers"]}
    assert used == images, "every image is tagged in one place (kustomization images:)"


def test_manifests_reference_only_what_exists() -> None:
    docs = _manifests()
    secret_keys = {k for n, d in docs if d["kind"] == "Secret" for k in d["stringData"]}
    claims = {d["metadata"]["name"] for _, d in docs if d["kind"] == "PersistentVolumeClaim"}
    configmaps = {d["metadata"]["name"] for _, d in docs if d["kind"] == "ConfigMap"}
    readme = (DEPLOY / "README.md").read_text()
    for where, _, pod in _pod_specs():
        for c in pod["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "looplift" and ref["key"] in secret_keys, f"{where}: {env['name']}"
        for v in pod.get("volumes", []):
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims, f"{where}: {v}"
            if "configMap" in v:
                assert v["configMap"]["name"] in configmaps, f"{where}: {v}"
            if "secret" in v:  # TLS material the operator creates: deploy/README.md must say how
                assert f"create secret generic {v['secret']['secretName']}" in readme, f"{where}: {v}"
        mounts = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert mounts <= {v["name"] for v in pod.get("volumes", [])} | {"data"}, where  # data: a claim template


def test_services_select_pods_and_name_their_ports() -> None:
    pods = list(_pod_specs())
    for _, svc in _manifests():
        if svc["kind"] != "Service":
            continue
        sel = svc["spec"]["selector"]
        matched = [pod for _, meta, pod in pods if sel.items() <= meta.get("labels", {}).items()]
        assert len(matched) == 1, f"Service {svc['metadata']['name']} selects {len(matched)} workloads"
        ports = {p["name"] for c in matched[0]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports, svc["metadata"]["name"]


def test_long_running_containers_have_probes_and_resources() -> None:
    for where, _, pod in _pod_specs():
        for c in pod["containers"]:
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], where
            if where.startswith("CronJob"):
                continue
            assert "readinessProbe" in c and "livenessProbe" in c, where
            http = [c[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe") if "httpGet" in c[p]]
            assert all(path in ("/health", "/metrics") for path in http) and (not http or "/health" in http), where
    gpu = {w for w, _, pod in _pod_specs() for c in pod["containers"]
           if c["resources"]["limits"].get("nvidia.com/gpu")}
    assert gpu == {"StatefulSet/vllm", "CronJob/looplift-retrain"}


def _looplift_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every looplift command the manifests and the compose file run."""
    found = [(w, c["args"]) for w, _, pod in _pod_specs() for c in pod["containers"] if c["image"] == "looplift"]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    found += [(f"compose/{n}", s["command"]) for n, s in compose["services"].items()
              if str(s.get("image", "")).startswith("${LOOPLIFT_IMAGE")]
    return found


@pytest.mark.parametrize("where,argv", _looplift_commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_looplift_command_and_flag_exists(where: str, argv: list[str]) -> None:
    from typer.testing import CliRunner

    import collector._cli
    import looplift._cli
    import trainer._cli

    apps = {"looplift": looplift._cli.app, "collector": collector._cli.app, "trainer": trainer._cli.app}
    words = [a for a in argv[1:] if not a.startswith("-")][:2]
    sub = words[:2] if argv[0] == "looplift" else words[:1]
    res = CliRunner().invoke(apps[argv[0]], [*sub, "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    for flag in (a.split("=")[0] for a in argv if a.startswith("--")):
        assert re.search(rf"{re.escape(flag)}\b", res.output), f"{where}: `{' '.join([argv[0], *sub])}` has no {flag}"


def test_the_compose_file_is_valid_against_the_compose_spec() -> None:
    from jsonschema import Draft201909Validator

    schema = json.loads((ROOT / "tests" / "data" / "compose_spec.json").read_text())
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    errors = sorted(Draft201909Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    services = doc["services"]
    assert {"postgres", "collector", "vllm", "gateway", "retrain"} <= set(services)
    for name, s in services.items():
        assert set(s.get("depends_on", {})) <= set(services), name
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            assert src.startswith(("/", ".", "$")) or src in doc["volumes"], f"{name}: volume {src} is not declared"
        if name != "retrain":
            assert "healthcheck" in s, name
    # Every variable without a default is documented in env.example.
    text = (DEPLOY / "docker-compose.yml").read_text()
    documented = set(re.findall(r"^([A-Z_]+)=", (DEPLOY / "env.example").read_text(), re.M))
    needed = set(re.findall(r"\$\{([A-Z_]+)(?::?\?[^}]*)?\}", text))
    assert needed <= documented, needed - documented


def test_the_dockerfile_copies_what_exists() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+(?: \S+)*) \S+$", text, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), path


# ---- the gateway as the manifests run it: over a vLLM started elsewhere -------------------------

@pytest.mark.vllm
def test_the_gateway_serves_over_an_upstream_vllm(vllm_server: Any, tmp_path: Path) -> None:
    from server._vllm import free_port

    port = free_port()
    env = {**os.environ, "LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_ADMIN_TOKEN": "t" * 32}
    proc = subprocess.Popen([sys.executable, "-c", "from looplift._cli import main; main()", "server", "start", "--upstream",
                             vllm_server.url, "--port", str(port)],  # type: ignore[attr-defined]
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)
        models = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
        assert "policy-v0" in models
        r = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "policy-v0"
        versions = httpx.get(f"{url}/admin/versions", headers={"Authorization": "Bearer " + "t" * 32}, timeout=10)
        assert versions.json()["serving"] == "policy-v0"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
