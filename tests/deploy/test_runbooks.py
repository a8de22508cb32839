"""Every runbook has the four sections, uses only metric names the services export, is listed in
runbooks/README.md, and names only `kairos` commands that exist (walked from app.cli.main, with their
options) or are in the planned list below."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from app.cli import main

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "runbooks"
PAGES = sorted(p for p in RUNBOOKS.glob("*.md") if p.name != "README.md")
SECTIONS = ["Symptoms", "Dashboards and metrics", "Commands", "Verify recovery"]
REQUIRED_TOPICS = {
    "region-failover",
    "scheduler-shard-takeover",
    "dead-letters",
    "hot-tenant-and-herd",
    "downstream-outage",
    "database-restore",
    "scaling-out",
    "key-rotation",
}
# Commands the runbooks may name before they exist (the README marks them "(planned)").
PLANNED = {("drill", "region-failover"), ("drill", "scheduler-kill"), ("drill", "worker-stall")}
METRICS = {
    "kairos_dispatch_lag_seconds",
    "kairos_start_lag_seconds",
    "kairos_ready_queue_depth",
    "kairos_executions_total",
    "kairos_lease_expiries_total",
    "kairos_fenced_batches_total",
    "kairos_shards_owned",
    "kairos_breaker_state",
    "kairos_http_request_duration_seconds",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")

# `kairos` as a command: at the start of a command line or code span, after a shell separator, or after
# the `--` of `kubectl exec`. Not `-n kairos`, `helm upgrade kairos`, `deploy/kairos-api`.
INVOCATION = re.compile(r"(?:^|\$ |[;|&(]\s*|--\s+|`)kairos(?=[\s`]|$)((?:[ \t]+[^\s`;|&)]+)*)", re.MULTILINE)
# Names that look like metrics but are not: the databases of database-restore.md, the SDK's package.
NOT_METRICS = {"kairos_restored", "kairos_damaged", "kairos_sdk"}


def code_of(text: str) -> list[str]:
    """The lines of fenced code blocks and the inline code spans of a Markdown text."""
    fenced = re.findall(r"^\s*```[^\n]*\n(.*?)^\s*```", text, flags=re.MULTILINE | re.DOTALL)
    prose = re.sub(r"^\s*```[^\n]*\n.*?^\s*```", "", text, flags=re.MULTILINE | re.DOTALL)
    lines = [line for block in fenced for line in block.replace("\\\n", " ").splitlines()]
    return lines + ["`" + span for span in re.findall(r"`([^`\n]+)`", prose)]


def invocations(text: str) -> list[list[str]]:
    found = []
    for line in code_of(text):
        for match in INVOCATION.finditer(line):
            words = match.group(1).split("#")[0]
            if not words.strip():
                continue  # the command's name alone, in prose
            try:
                found.append(shlex.split(words))
            except ValueError:
                found.append(words.split())
    return found


def resolve(words: list[str]) -> tuple[tuple[str, ...], click.Command | None, list[str]]:
    """(command path, the click command or None if planned, the remaining words)."""
    command: click.Command = main
    path: list[str] = []
    rest = list(words)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(click.Context(command), rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        command = sub
    if isinstance(command, click.Group):
        planned = next((p for p in PLANNED if tuple(words[: len(p)]) == p), None)
        assert planned is not None, f"`kairos {' '.join(words)}`: no such command, and not in the planned list"
        return planned, None, words[len(planned) :]
    return tuple(path), command, rest


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_four_sections_in_order(page: Path) -> None:
    headings = re.findall(r"^## (.+?)\s*$", page.read_text(), flags=re.MULTILINE)
    assert headings == SECTIONS, headings
    assert page.read_text().startswith("# "), "a title first"
    for body in re.split(r"^## .+$", page.read_text(), flags=re.MULTILINE)[1:]:
        assert len(body.split()) >= 20, "a section says something"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_metrics_are_the_exported_ones(page: Path) -> None:
    text = page.read_text()
    dashboards = text.split("## Dashboards and metrics")[1].split("## Commands")[0]
    assert "/dashboard" in dashboards
    named = set(re.findall(r"\bkairos_[a-z_]+[a-z]", text))
    unknown = {
        m
        for m in named - NOT_METRICS
        if m not in METRICS and not any(m.endswith(s) and m.removesuffix(s) in METRICS for s in HISTOGRAM_SUFFIXES)
    }
    assert unknown == set(), f"not an exported metric: {sorted(unknown)}"
    assert set(re.findall(r"\bkairos_[a-z_]+[a-z]", dashboards)) & METRICS, "the dashboards section names metrics"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_are_real_or_planned(page: Path) -> None:
    text = page.read_text()
    commands = text.split("## Commands")[1].split("## Verify recovery")[0]
    found = invocations(text)
    assert invocations(commands) or "kubectl" in commands, "the Commands section has commands"
    assert re.search(
        r"^\s*(kubectl|helm|cockroach|kairos|curl|terraform)\b", "\n".join(code_of(commands)), flags=re.MULTILINE
    ), "exact commands in code blocks"
    for words in found:
        path, command, rest = resolve(words)
        if command is None:
            continue
        options = {
            opt
            for param in command.params
            if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)
        } | {"--help"}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in options, f"`kairos {' '.join(path)}` has no option {word}"


def test_planned_commands_are_marked_and_none_exists_already() -> None:
    for path in PLANNED:
        command, _, _ = resolve(list(path))
        assert command == path  # resolve() returns the planned path only when click does not know it
    for page in PAGES:
        for line in page.read_text().splitlines():
            for words in invocations(line):
                if resolve(words)[1] is None:
                    assert "(planned)" in line or "planned" in line.lower(), f"{page.name}: mark it planned: {line}"


def test_the_checker_catches_a_made_up_command_and_option() -> None:
    with pytest.raises(AssertionError, match="no such command"):
        resolve(["tenants", "delete", "acme"])
    assert invocations("```sh\nkubectl -n kairos exec deploy/kairos-api -- kairos tenants list\n```") == [
        ["tenants", "list"]
    ]
    assert invocations("helm -n kairos upgrade kairos helm/kairos") == []
    path, command, rest = resolve(["tenants", "set-quota", "acme", "--max-inflight", "5"])
    assert path == ("tenants", "set-quota") and command is not None and "--max-inflight" in rest


def test_the_index_lists_every_runbook_and_every_topic_is_covered() -> None:
    index = (RUNBOOKS / "README.md").read_text()
    links = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    runbook_links = {link for link in links if "/" not in link}
    assert runbook_links == {p.name for p in PAGES}
    for link in links:
        assert (RUNBOOKS / link).resolve().exists(), link
    assert {p.stem for p in PAGES} >= REQUIRED_TOPICS
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (RUNBOOKS / link).resolve().exists(), f"{page.name}: broken link {link}"
