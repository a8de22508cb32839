"""Render helm/kairos with Helm itself and validate what comes out.

Rendering goes through helm-python-sdk, which binds Helm's own Go SDK (libhelm_c, Helm v4) with
ctypes: the same template engine, Sprig functions, values coalescing and values.schema.json check as
`helm template`, offline (`lookup` returns nothing). Built-in objects are validated against the
Kubernetes OpenAPI schemas of KUBERNETES_VERSION (kubernetes-validate, strict: unknown fields fail);
the Prometheus Operator's ServiceMonitor against the subset of its CRD schema this chart uses.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kairos"
EXAMPLES = CHART / "examples"
# The oldest minor the chart supports in production (GKE's regular channel, terraform/) and the one
# the manifests are validated against.
KUBERNETES_VERSION = "1.33.0"
RELEASE = "kairos"
NAMESPACE = "kairos"
# What a default install must be given: the database (there is no safe default; an empty URL would
# make every pod start its own embedded PostgreSQL).
REQUIRED = {
    "secrets": {"databaseUrl": "cockroachdb://kairos:secret@db.example.internal:26257/kairos?sslmode=verify-full"}
}

SERVICE_MONITOR_SCHEMA = json.loads((Path(__file__).parent / "servicemonitor.schema.json").read_text())


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep merge as `helm -f base -f override` does: maps merge key by key, anything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def values_of(*files: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in files:
        values = merge(values, yaml.safe_load(Path(f).read_text()) or {})
    return merge(values, overrides or {})


def render(values: dict[str, Any], *, upgrade: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Manifests by template file, as `helm template` (an install, or an upgrade) would print them."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(
            values,
            name=RELEASE,
            namespace=NAMESPACE,
            revision=2 if upgrade else 1,
            is_install=not upgrade,
            is_upgrade=upgrade,
        )
    out: dict[str, list[dict[str, Any]]] = {}
    for path, text in rendered.items():
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        docs = [d for d in yaml.safe_load_all(text) if d]
        if docs:
            out[path] = docs
    return out


def manifests(values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    return [doc for docs in render(values, **kwargs).values() for doc in docs]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def validate(doc: dict[str, Any]) -> None:
    """Raise if ``doc`` is not a valid object of its kind."""
    if doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "ServiceMonitor":
        import jsonschema

        jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
        return
    # A kind without a schema raises SchemaNotFoundError: nothing passes unvalidated.
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
