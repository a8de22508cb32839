"""terraform/ is complete and clean: every .tf parses (python-hcl2), every variable is described, typed
and used, every output described, every call of a local module passes exactly that module's variables,
the topology is three CockroachDB regions and one GKE cluster and Helm release per region, and
checkov finds nothing (skips only inline, with a reason)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
CHECKOV_REQUIREMENTS = Path(__file__).parent / "checkov-requirements.txt"
MODULE_DIRS = [TERRAFORM, *sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir())]


def unquote(text: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals and block labels."""
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def parse(module_dir: Path) -> dict[str, list[Any]]:
    """Every top-level block of the module's .tf files, by block type."""
    blocks: dict[str, list[Any]] = {}
    for tf in sorted(module_dir.glob("*.tf")):
        with tf.open() as f:
            parsed = hcl2.load(f)
        for kind, items in parsed.items():
            blocks.setdefault(kind, []).extend(items)
    return blocks


def labelled(blocks: dict[str, list[Any]], kind: str) -> dict[str, dict[str, Any]]:
    """{label: body} of the one-label blocks of a kind (variable, output, module)."""
    return {unquote(label): body for item in blocks.get(kind, []) for label, body in item.items()}


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


PARSED = {d: parse(d) for d in MODULE_DIRS}


@pytest.mark.parametrize("module_dir", MODULE_DIRS, ids=lambda d: str(d.relative_to(ROOT)))
def test_variables_are_described_typed_and_used(module_dir: Path) -> None:
    blocks = PARSED[module_dir]
    variables = labelled(blocks, "variable")
    assert variables, module_dir
    for name, body in variables.items():
        assert unquote(body.get("description", "")).strip(), f"variable {name} has no description"
        assert "type" in body, f"variable {name} has no type"
    # A use is a reference outside the variable blocks (a validation referring to itself is no use).
    used = {
        m
        for kind, items in blocks.items()
        if kind != "variable"
        for text in strings(items)
        for m in re.findall(r"\bvar\.([A-Za-z_][A-Za-z0-9_-]*)", text)
    }
    assert sorted(set(variables) - used) == [], "declared but never used"
    assert sorted(used - set(variables)) == [], "used but never declared"


@pytest.mark.parametrize("module_dir", MODULE_DIRS, ids=lambda d: str(d.relative_to(ROOT)))
def test_outputs_are_described(module_dir: Path) -> None:
    outputs = labelled(PARSED[module_dir], "output")
    assert outputs, module_dir
    for name, body in outputs.items():
        assert unquote(body.get("description", "")).strip(), f"output {name} has no description"


def test_local_module_calls_pass_exactly_their_variables() -> None:
    meta = {
        "source",
        "version",
        "providers",
        "count",
        "for_each",
        "depends_on",
        "__is_block__",
        "__comments__",
        "__start_line__",
        "__end_line__",
    }
    for module_dir in MODULE_DIRS:
        for name, call in labelled(PARSED[module_dir], "module").items():
            source = unquote(call["source"])
            if not source.startswith("./"):
                continue
            target = (module_dir / source).resolve()
            declared = labelled(PARSED[target], "variable")
            passed = set(call) - meta
            required = {v for v, body in declared.items() if "default" not in body}
            assert passed - set(declared) == set(), f"module {name} passes unknown arguments"
            assert required - passed == set(), f"module {name} misses required variables"
            outputs = labelled(PARSED[target], "output")
            used = {m for text in strings(PARSED[module_dir]) for m in re.findall(rf"\bmodule\.{name}\.(\w+)", text)}
            assert used - set(outputs) == set(), f"module.{name} has no such outputs"


def test_providers_and_registry_modules_are_pinned() -> None:
    for module_dir in MODULE_DIRS:
        (terraform,) = PARSED[module_dir]["terraform"]
        assert "required_version" in terraform
        for providers in terraform["required_providers"]:
            for name, spec in providers.items():
                if name.startswith("__"):  # python-hcl2's own keys
                    continue
                assert unquote(spec.get("version", "")), f"{module_dir}: provider {name} is not pinned"
        for name, call in labelled(PARSED[module_dir], "module").items():
            if not unquote(call["source"]).startswith("./"):
                assert unquote(call.get("version", "")), f"module {name} from a registry has no version"
    (root_terraform,) = PARSED[TERRAFORM]["terraform"]
    sources = {
        unquote(spec["source"])
        for p in root_terraform["required_providers"]
        for name, spec in p.items()
        if not name.startswith("__")
    }
    assert {"cockroachdb/cockroach", "hashicorp/google", "hashicorp/helm"} <= sources


def test_three_regions_one_cluster_and_one_release_each() -> None:
    root = PARSED[TERRAFORM]
    variables = labelled(root, "variable")
    standby = variables["standby_regions"]
    assert len(standby["default"]) == 2 and "length(var.standby_regions) == 2" in standby["validation"][0]["condition"]
    (cockroach,) = [
        body
        for item in root["resource"]
        for kind, bodies in item.items()
        if unquote(kind) == "cockroach_cluster"
        for body in bodies.values()
    ]
    assert unquote(cockroach["cloud_provider"]) == "GCP"
    regions_expression = " ".join(strings(cockroach["regions"]))
    assert "local.regions" in regions_expression and "var.primary_region" in regions_expression
    assert cockroach["backup_config"]["enabled"] is True
    (locals_block,) = [b for b in root["locals"] if "regions" in b]
    assert locals_block["regions"] == "${concat([var.primary_region], var.standby_regions)}"
    modules = labelled(root, "module")
    clusters = {n: m for n, m in modules.items() if unquote(m["source"]) == "./modules/gke-region"}
    releases = {n: m for n, m in modules.items() if unquote(m["source"]) == "./modules/kairos-release"}
    assert len(clusters) == len(releases) == 3
    chart = TERRAFORM / ".." / "helm" / "kairos"
    region_of = {n: m["region"] for n, m in clusters.items()}
    for name, release in releases.items():
        values_file = release["values_file"].replace("${local.chart}", str(chart)).strip('"')
        assert Path(values_file).is_file(), values_file
        assert release["primary_region"] == "${var.primary_region}"
        expected = "values-primary.yaml" if release["region"] == "${var.primary_region}" else "values-standby.yaml"
        assert values_file.endswith(expected), name
        # The release's Helm provider is the alias that points at the cluster of the same region.
        alias = release["providers"]["helm"].removeprefix("${").removesuffix("}").split(".")[1]
        (provider,) = [
            body
            for item in root["provider"]
            for kind, body in item.items()
            if unquote(kind) == "helm" and unquote(body.get("alias")) == alias
        ]
        cluster = re.search(r"module\.(\w+)\.endpoint", provider["kubernetes"][0]["host"]).group(1)
        assert region_of[cluster] == release["region"], (name, cluster)
    assert sorted(region_of.values()) == sorted(
        ["${var.primary_region}", "${var.standby_regions[0]}", "${var.standby_regions[1]}"]
    )
    (gke_region,) = [PARSED[d] for d in MODULE_DIRS if d.name == "gke-region"]
    gke = labelled(gke_region, "module")["gke"]
    assert unquote(gke["source"]).startswith("terraform-google-modules/kubernetes-engine/google")


# -- checkov ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def checkov() -> Path:
    """checkov, from $KAIROS_CHECKOV or a virtualenv of its own made once from checkov-requirements.txt."""
    if os.environ.get("KAIROS_CHECKOV"):
        return Path(os.environ["KAIROS_CHECKOV"])
    digest = hashlib.sha256(CHECKOV_REQUIREMENTS.read_bytes()).hexdigest()[:12]
    env_dir = Path(sys.prefix) / "tools" / f"checkov-{digest}"
    binary = env_dir / "bin" / "checkov"
    if not (env_dir / ".installed").exists():
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env_dir)], check=True, timeout=120)
        done = subprocess.run(
            [
                str(env_dir / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
                str(CHECKOV_REQUIREMENTS),
            ],
            capture_output=True,
            text=True,
            timeout=270,
        )
        assert done.returncode == 0, f"installing checkov failed:\n{done.stderr[-3000:]}"
        (env_dir / ".installed").write_text(f"installed in {time.monotonic() - started:.0f} s\n")
    return binary


def test_every_checkov_skip_gives_a_reason() -> None:
    skips = [
        (tf, line) for tf in TERRAFORM.rglob("*.tf") for line in tf.read_text().splitlines() if "checkov:skip" in line
    ]
    for tf, line in skips:
        assert re.search(r"#checkov:skip=CKV2?_[A-Z0-9_]+:\S.{20,}", line), f"{tf}: a skip needs its reason: {line}"


def test_checkov_finds_nothing(checkov: Path) -> None:
    # --skip-download: no call to Prisma Cloud for guidelines or policies (no network here).
    done = subprocess.run(
        [str(checkov), "-d", str(TERRAFORM), "--quiet", "--compact", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "Failed checks: 0" in done.stdout, report
    passed = int(re.search(r"Passed checks: (\d+)", done.stdout).group(1))
    assert passed >= 20, report  # it did look at the resources


def test_checkov_is_not_a_rubber_stamp(checkov: Path, tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(
        'resource "google_compute_subnetwork" "open" {\n'
        '  name          = "open"\n  network       = "default"\n'
        '  ip_cidr_range = "10.0.0.0/24"\n}\n'
    )
    done = subprocess.run(
        [str(checkov), "-d", str(tmp_path), "--quiet", "--compact", "--skip-download", "--framework", "terraform"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "CKV_GCP_26" in done.stdout, done.stdout + done.stderr
