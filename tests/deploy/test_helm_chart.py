"""helm/kairos renders, with Helm's own engine, into valid Kubernetes objects that wire up as the tiers
need: for the default values, for a two-region pair (examples/values-primary.yaml and
values-standby.yaml), and for the switches (existing secret, autoscaling off, database CA)."""

from __future__ import annotations

import subprocess
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.rendering import (
    CHART,
    EXAMPLES,
    KUBERNETES_VERSION,
    REQUIRED,
    by_kind,
    manifests,
    merge,
    render,
    validate,
    values_of,
)

TIERS = ("api", "scheduler", "executor")
DEFAULTS = values_of(overrides=REQUIRED)
PRIMARY = values_of(EXAMPLES / "values-primary.yaml")
STANDBY = values_of(EXAMPLES / "values-standby.yaml")
CASES = {
    "default": DEFAULTS,
    "primary": PRIMARY,
    "standby": STANDBY,
    "everything-on": merge(
        DEFAULTS,
        {
            "serviceMonitor": {"enabled": True},
            "region": "us-east1",
            "primaryRegion": "us-east1",
            "secrets": {"databaseCaKey": "ca.crt", "databaseCa": "PEM"},
        },
    ),
}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def selected(selector: dict[str, str], labelled: dict[str, dict[str, str]]) -> list[str]:
    """The names in ``labelled`` (name -> labels) that ``selector`` selects, sorted."""
    return sorted(name for name, labels in labelled.items() if matches(selector, labels))


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_is_valid_for_the_kubernetes_version(case: str) -> None:
    docs = manifests(CASES[case])
    assert docs
    for doc in docs:
        try:
            validate(doc)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes {KUBERNETES_VERSION}: "
                f"{path}: {exc.message}"
            )


def test_the_validator_rejects_what_kubernetes_would() -> None:
    deployment = by_kind(manifests(DEFAULTS), "Deployment")["kairos-api"]
    broken = merge(deployment, {"spec": {"replicas": "three"}})
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)
    misspelt = merge(deployment, {"spec": {"template": {"spec": {"terminationGracePeriod": 30}}}})
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(misspelt)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate({"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}})
    monitor = by_kind(manifests(CASES["everything-on"]), "ServiceMonitor")["kairos"]
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        validate(merge(monitor, {"spec": {"endpoints": [{"port": "metrics", "interval": "15 seconds"}]}}))


def test_helm_lint_finds_nothing_but_the_unvendored_optional_dependency() -> None:
    for case, values in CASES.items():
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
        problems = [m["error"] for m in report["messages"] if m["severity"] >= 2]
        # Chart.yaml's cockroachdb dependency is fetched by `helm dependency build`, never committed.
        assert set(problems) <= {"chart directory is missing these dependencies: cockroachdb"}, (case, problems)


def test_three_tiers_run_the_same_image_with_their_own_argument() -> None:
    deployments = by_kind(manifests(DEFAULTS), "Deployment")
    assert sorted(deployments) == [f"kairos-{t}" for t in sorted(TIERS)]
    for tier in TIERS:
        spec = pod_spec(deployments[f"kairos-{tier}"])
        (container,) = spec["containers"]
        assert container["image"] == "ghcr.io/kairos/kairos:0.1.0"
        assert container["args"] == [tier]
        assert "command" not in container  # the image's ENTRYPOINT is kairos
        env = env_of(container)
        assert env["KAIROS_API_HOST"] == env["KAIROS_GRPC_HOST"] == "0.0.0.0"
        ports = (env["KAIROS_API_PORT"], env["KAIROS_GRPC_PORT"], env["KAIROS_METRICS_PORT"])
        assert ports == ("8080", "50051", "9464")
        for name, key in (("KAIROS_DATABASE_URL", "database-url"), ("KAIROS_ADMIN_TOKEN", "admin-token")):
            assert env[name] == {"secretKeyRef": {"name": "kairos-secrets", "key": key}}
        resources = container["resources"]
        assert set(resources) == {"requests", "limits"}
        assert all(set(resources[k]) == {"cpu", "memory"} for k in resources)
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
        assert security["capabilities"]["drop"] == ["ALL"]
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 10001
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/var/lib/kairos", "/tmp"}
    assert env_of(pod_spec(deployments["kairos-api"])["containers"][0])["KAIROS_API_WORKERS"] == "2"


def test_probes_follow_the_health_contract() -> None:
    deployments = by_kind(manifests(DEFAULTS), "Deployment")
    probe_port = {"api": "http", "scheduler": "metrics", "executor": "metrics"}
    container_ports = {
        "api": {"http": 8080, "metrics": 9464},
        "scheduler": {"metrics": 9464},
        "executor": {"grpc": 50051, "metrics": 9464},
    }
    for tier in TIERS:
        (container,) = pod_spec(deployments[f"kairos-{tier}"])["containers"]
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == container_ports[tier]
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            assert container[probe]["httpGet"] == {"path": path, "port": probe_port[tier]}, (tier, probe)


def test_disruption_budgets_spread_and_services_select_the_right_pods() -> None:
    docs = manifests(DEFAULTS)
    deployments = by_kind(docs, "Deployment")
    pod_labels = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    for name, deployment in deployments.items():
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selected(selector, pod_labels) == [name]
        spread = pod_spec(deployment)["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    pdbs = by_kind(docs, "PodDisruptionBudget")
    assert sorted(pdbs) == sorted(deployments)
    for name, pdb in pdbs.items():
        assert selected(pdb["spec"]["selector"]["matchLabels"], pod_labels) == [name]
    assert pdbs["kairos-scheduler"]["spec"]["minAvailable"] == 1
    assert deployments["kairos-scheduler"]["spec"]["replicas"] >= 2

    services = by_kind(docs, "Service")
    api, executor, metrics = services["kairos-api"], services["kairos-executor"], services["kairos-metrics"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in api["spec"]["ports"]] == [("http", 8080, "http")]
    assert [(p["name"], p["port"], p["targetPort"]) for p in executor["spec"]["ports"]] == [("grpc", 50051, "grpc")]
    assert selected(api["spec"]["selector"], pod_labels) == ["kairos-api"]
    assert selected(executor["spec"]["selector"], pod_labels) == ["kairos-executor"]
    assert metrics["spec"]["clusterIP"] == "None"
    assert selected(metrics["spec"]["selector"], pod_labels) == sorted(deployments)


def test_executors_autoscale_on_the_ready_queue_depth() -> None:
    docs = manifests(DEFAULTS)
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kairos-executor"}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == "kairos_ready_queue_depth"
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "500"}
    # The HorizontalPodAutoscaler owns the replica count: an upgrade must not reset it.
    assert "replicas" not in by_kind(docs, "Deployment")["kairos-executor"]["spec"]

    pods = manifests(merge(DEFAULTS, {"executor": {"autoscaling": {"metric": {"type": "Pods"}}}}))
    (metric,) = by_kind(pods, "HorizontalPodAutoscaler")["kairos-executor"]["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "kairos_ready_queue_depth"

    fixed = manifests(merge(DEFAULTS, {"executor": {"autoscaling": {"enabled": False}, "replicaCount": 4}}))
    assert by_kind(fixed, "HorizontalPodAutoscaler") == {}
    assert by_kind(fixed, "Deployment")["kairos-executor"]["spec"]["replicas"] == 4

    with pytest.raises(helm.HelmError, match="External"):
        render(merge(DEFAULTS, {"executor": {"autoscaling": {"metric": {"type": "Resource"}}}}))


def test_migrations_run_as_a_hook_after_the_secret_and_before_the_pods() -> None:
    docs = manifests(DEFAULTS)
    (job,) = by_kind(docs, "Job").values()
    (secret,) = by_kind(docs, "Secret").values()
    hook = job["metadata"]["annotations"]
    assert set(hook["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert set(secret["metadata"]["annotations"]["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    # Hooks of one phase run in weight order: the Secret the Job reads must exist first.
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(hook["helm.sh/hook-weight"])
    spec = pod_spec(job)
    (container,) = spec["containers"]
    assert container["args"] == ["db", "upgrade"]
    assert spec["restartPolicy"] == "Never"
    # Hooks run before the release's own objects exist: no reference to the chart's ServiceAccount.
    assert spec["serviceAccountName"] == "default"
    database_url = env_of(container)["KAIROS_DATABASE_URL"]
    assert database_url == {"secretKeyRef": {"name": "kairos-secrets", "key": "database-url"}}

    upgrade = by_kind(manifests(DEFAULTS, upgrade=True), "Job")
    assert list(upgrade) == ["kairos-db-upgrade"]
    assert by_kind(manifests(merge(DEFAULTS, {"migration": {"enabled": False}})), "Job") == {}


def test_the_secret_holds_the_database_url_and_an_admin_token() -> None:
    import base64

    (secret,) = by_kind(manifests(DEFAULTS), "Secret").values()
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["database-url"] == REQUIRED["secrets"]["databaseUrl"]
    assert len(data["admin-token"]) >= 32  # generated, none given

    given = by_kind(manifests(merge(DEFAULTS, {"secrets": {"adminToken": "t" * 40}})), "Secret")["kairos-secrets"]
    assert base64.b64decode(given["data"]["admin-token"]).decode() == "t" * 40

    with pytest.raises(helm.HelmError, match=r"secrets\.databaseUrl is required"):
        render(values_of())


def test_an_existing_secret_replaces_the_charts_own() -> None:
    values = values_of(
        overrides={"secrets": {"existingSecret": "kairos-database", "databaseUrlKey": "url", "databaseCaKey": "ca.crt"}}
    )
    docs = manifests(values)
    assert by_kind(docs, "Secret") == {}
    for doc in [*by_kind(docs, "Deployment").values(), *by_kind(docs, "Job").values()]:
        spec = pod_spec(doc)
        env = env_of(spec["containers"][0])
        assert env["KAIROS_DATABASE_URL"] == {"secretKeyRef": {"name": "kairos-database", "key": "url"}}
        assert env["KAIROS_ADMIN_TOKEN"]["secretKeyRef"]["name"] == "kairos-database"
        (ca,) = [v for v in spec["volumes"] if v["name"] == "database-ca"]
        assert ca["secret"]["secretName"] == "kairos-database"
        assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "db-ca.crt"}]
        assert {
            "name": "database-ca",
            "mountPath": "/etc/kairos/db-ca.crt",
            "subPath": "db-ca.crt",
            "readOnly": True,
        } in spec["containers"][0]["volumeMounts"]


def test_a_region_pair_shares_the_primary_and_differs_in_region() -> None:
    rendered = {}
    for name, values in (("primary", PRIMARY), ("standby", STANDBY)):
        docs = manifests(values)
        envs = [
            env_of(c)
            for d in [*by_kind(docs, "Deployment").values(), *by_kind(docs, "Job").values()]
            for c in pod_spec(d)["containers"]
        ]
        assert len({(e["KAIROS_REGION"], e["KAIROS_PRIMARY_REGION"]) for e in envs}) == 1
        rendered[name] = (envs[0]["KAIROS_REGION"], envs[0]["KAIROS_PRIMARY_REGION"], docs)
    (p_region, p_primary, p_docs), (s_region, s_primary, s_docs) = rendered["primary"], rendered["standby"]
    assert p_region == p_primary == s_primary == PRIMARY["primaryRegion"]
    assert s_region == STANDBY["region"] != p_region
    for docs in (p_docs, s_docs):
        (monitor,) = by_kind(docs, "ServiceMonitor").values()
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
        assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
        services = {n: svc["metadata"]["labels"] for n, svc in by_kind(docs, "Service").items()}
        assert selected(monitor["spec"]["selector"]["matchLabels"], services) == ["kairos-metrics"]
        assert by_kind(docs, "Secret") == {}  # both name kairos-database (terraform/ or made by hand)
    # The standby keeps enough schedulers to carry the schedule alone.
    assert by_kind(s_docs, "Deployment")["kairos-scheduler"]["spec"]["replicas"] >= 2


def test_service_monitor_is_optional() -> None:
    assert by_kind(manifests(DEFAULTS), "ServiceMonitor") == {}
    (monitor,) = by_kind(manifests(merge(DEFAULTS, {"serviceMonitor": {"enabled": True}})), "ServiceMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"


def test_metrics_listen_on_the_pod_address_and_scrapes_carry_the_metrics_token() -> None:
    import base64

    docs = manifests(merge(DEFAULTS, {"serviceMonitor": {"enabled": True}}))
    (secret,) = by_kind(docs, "Secret").values()
    token = base64.b64decode(secret["data"]["metrics-token"]).decode()
    assert len(token) >= 32  # generated, none given
    for tier in TIERS:
        env = env_of(pod_spec(by_kind(docs, "Deployment")[f"kairos-{tier}"])["containers"][0])
        # Not 0.0.0.0: the port carries per-tenant series; the pod's address is what the kubelet and Prometheus use.
        assert env["KAIROS_METRICS_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["KAIROS_METRICS_TOKEN"] == {"secretKeyRef": {"name": "kairos-secrets", "key": "metrics-token"}}
    (monitor,) = by_kind(docs, "ServiceMonitor").values()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "kairos-secrets", "key": "metrics-token"},
    }
    given = by_kind(manifests(merge(DEFAULTS, {"secrets": {"metricsToken": "m" * 40}})), "Secret")["kairos-secrets"]
    assert base64.b64decode(given["data"]["metrics-token"]).decode() == "m" * 40


def test_cockroachdb_is_an_optional_unvendored_dependency() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (dependency,) = chart["dependencies"]
    assert dependency["name"] == "cockroachdb"
    assert dependency["condition"] == "cockroachdb.enabled"
    assert dependency["repository"].startswith("https://")
    assert values_of(CHART / "values.yaml")["cockroachdb"]["enabled"] is False
    vendored = subprocess.run(["git", "ls-files", "charts"], cwd=CHART, capture_output=True, text=True, check=True)
    assert vendored.stdout == ""


def test_values_are_checked_against_the_schema() -> None:
    with pytest.raises(helm.HelmError, match="ports"):
        render(merge(DEFAULTS, {"ports": {"http": "eighty"}}))
    with pytest.raises(helm.HelmError, match="databaseUrl"):
        render(merge(DEFAULTS, {"secrets": {"databaseUrl": "mysql://nope"}}))


def test_every_tier_gets_a_generated_signing_secret_key_and_a_given_one_is_kept() -> None:
    import base64

    from cryptography.fernet import Fernet

    docs = manifests(values_of(overrides=REQUIRED))
    [secret] = by_kind(docs, "Secret").values()
    Fernet(base64.b64decode(secret["data"]["secret-key"]).decode())  # a valid KAIROS_SECRET_KEY
    for kind in ("Deployment", "Job"):
        for name, doc in by_kind(docs, kind).items():
            env = [e for c in doc["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]
            [key] = [e for e in env if e["name"] == "KAIROS_SECRET_KEY"]
            assert key["valueFrom"]["secretKeyRef"]["key"] == "secret-key", name
    given = Fernet.generate_key().decode()
    docs = manifests(values_of(overrides=merge(REQUIRED, {"secrets": {"secretKey": given}})))
    [secret] = by_kind(docs, "Secret").values()
    assert base64.b64decode(secret["data"]["secret-key"]).decode() == given


def test_every_tier_signs_and_serves_identity_tokens_under_one_issuer() -> None:
    # Default: the API Service's in-cluster URL (where /.well-known/openid-configuration is served), the
    # same on every tier: the executors sign with it and the API publishes it.
    for kind in ("Deployment", "Job"):
        for name, doc in by_kind(manifests(DEFAULTS), kind).items():
            env = env_of(pod_spec(doc)["containers"][0])
            assert env["KAIROS_OIDC_ISSUER"] == "http://kairos-api.kairos.svc:8080", name
    given = "https://kairos.example.com"
    for name, doc in by_kind(manifests(merge(DEFAULTS, {"oidcIssuer": given})), "Deployment").items():
        assert env_of(pod_spec(doc)["containers"][0])["KAIROS_OIDC_ISSUER"] == given, name
    with pytest.raises(helm.HelmError, match="oidcIssuer"):
        render(merge(DEFAULTS, {"oidcIssuer": "kairos.example.com"}))  # not a URL
