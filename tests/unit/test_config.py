"""Settings: defaults, parsing and validation of every KAIROS_* variable, and the docs table."""

from __future__ import annotations

import ast
import os
from dataclasses import fields
from pathlib import Path

import pytest

from app import config, config_docs
from app.config import InvalidSetting, Settings, WorkerSettings, load, load_worker
from app.domain.shards import SHARD_COUNT
from app.scheduler.dispatcher import DispatcherConfig
from app.scheduler.leases import LeaserConfig, fair_share
from app.scheduler.loader import LoaderConfig

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_without_any_variable() -> None:
    s = load({})
    assert s == Settings()
    assert s.home == Path(".kairos").resolve()
    assert (s.database_url, s.db_isolation, s.db_pool_size) == ("", "SERIALIZABLE", 10)
    assert (s.api_host, s.api_port, s.api_workers) == ("127.0.0.1", 8080, os.cpu_count() or 1)
    assert (s.grpc_host, s.grpc_port, s.grpc_addr) == ("127.0.0.1", 50051, "127.0.0.1:50051")
    assert (s.lease_ttl_s, s.loader_interval_s, s.http_egress_allow, s.http_concurrency) == (10.0, 1.0, (), 512)
    assert (s.max_schedule_horizon_days, s.max_payload_bytes, s.demo) == (3660, 64 * 1024, False)
    assert (s.log_level, s.log_format, s.api_reuse_port) == ("INFO", "json", False)
    assert s.dispatch_ahead_s == 5.0 and s.dispatch_isolation == "READ COMMITTED"


def test_tier_configs_from_default_settings_equal_their_own_defaults() -> None:
    s = load({})
    assert DispatcherConfig.from_settings(s) == DispatcherConfig()
    assert LeaserConfig.from_settings(s) == LeaserConfig()
    assert LoaderConfig.from_settings(s) == LoaderConfig()


def test_tier_configs_take_their_variables() -> None:
    s = load(
        {
            "KAIROS_DISPATCH_BATCH_SIZE": "500",
            "KAIROS_DISPATCH_INFLIGHT_BATCHES": "2",
            "KAIROS_CATCH_UP_PER_TENANT_PER_S": "2.5",
            "KAIROS_DISPATCH_ISOLATION": "",
            "KAIROS_DISPATCH_AHEAD_S": "0",
            "KAIROS_LEASE_TTL_S": "3",
            "KAIROS_LEASER_INTERVAL_S": "0.25",
            "KAIROS_LOADER_INTERVAL_S": "2",
            "KAIROS_LOADER_WINDOW_INTERVAL_S": "0",
            "KAIROS_LOADER_MAX_ROWS_PER_TICK": "50",
        }
    )
    assert DispatcherConfig.from_settings(s) == DispatcherConfig(
        batch_size=500, max_inflight_batches=2, catch_up_per_tenant_per_s=2.5, isolation=None, ahead_s=0.0
    )
    assert LeaserConfig.from_settings(s) == LeaserConfig(ttl_s=3.0, interval_s=0.25)
    # The near scan's default follows the loader interval: max(5, 3 x interval).
    assert LoaderConfig.from_settings(s) == LoaderConfig(
        interval_s=2.0, near_s=6.0, window_interval_s=0.0, max_rows_per_tick=50
    )
    assert LoaderConfig.from_settings(load({"KAIROS_LOADER_NEAR_S": "1.5"})).near_s == 1.5


def test_values_are_parsed_and_normalised() -> None:
    s = load(
        {
            "KAIROS_HOME": "some/where",
            "KAIROS_DATABASE_URL": "cockroachdb://root@db:26257/kairos",
            "KAIROS_DB_ISOLATION": "read_committed",
            "KAIROS_API_PORT": " 9000 ",
            "KAIROS_API_WORKERS": "1",
            "KAIROS_GRPC_PORT": "0",
            "KAIROS_HTTP_EGRESS_ALLOW": " 10.0.0.0/8, ,hooks.internal ",
            "KAIROS_DEMO": "1",
            "KAIROS_LOG_LEVEL": "debug",
            "KAIROS_LOG_FORMAT": "TEXT",
            "KAIROS_API_REUSE_PORT": "1",
        }
    )
    assert s.home == Path("some/where").resolve() and s.pgdata == s.home / "pgdata"
    assert s.db_isolation == "READ COMMITTED"
    assert (s.api_port, s.api_workers, s.grpc_port, s.api_url) == (9000, 1, 0, "http://127.0.0.1:9000")
    assert s.http_egress_allow == ("10.0.0.0/8", "hooks.internal")
    assert s.demo and s.api_reuse_port
    assert (s.log_level, s.log_format) == ("DEBUG", "text")
    assert load({"KAIROS_DATABASE_URL": "postgresql+psycopg://u@h/db"}).database_url == "postgresql+psycopg://u@h/db"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "KAIROS_TRUSTED_PROXIES",
            "10.0.0.0/8, proxy.local",
            (
                "KAIROS_TRUSTED_PROXIES must be empty or a comma-separated "
                "list of IP addresses or networks (CIDR), or *, got '10.0.0.0/8, proxy.local'"
            ),
        ),
        ("KAIROS_API_PORT", "abc", "KAIROS_API_PORT must be an integer 1-65535, got 'abc'"),
        ("KAIROS_API_PORT", "0", "KAIROS_API_PORT must be an integer 1-65535, got '0'"),
        ("KAIROS_API_PORT", "70000", "KAIROS_API_PORT must be an integer 1-65535, got '70000'"),
        ("KAIROS_GRPC_PORT", "-1", "KAIROS_GRPC_PORT must be an integer 0-65535 (0 picks a free port), got '-1'"),
        ("KAIROS_API_WORKERS", "0", "KAIROS_API_WORKERS must be an integer >= 1, got '0'"),
        ("KAIROS_DB_POOL_SIZE", "1.5", "KAIROS_DB_POOL_SIZE must be an integer >= 1, got '1.5'"),
        (
            "KAIROS_DB_ISOLATION",
            "snapshot",
            "KAIROS_DB_ISOLATION must be one of SERIALIZABLE, REPEATABLE READ, READ COMMITTED, got 'snapshot'",
        ),
        (
            "KAIROS_DB_ISOLATION",
            "",
            ("KAIROS_DB_ISOLATION must be one of SERIALIZABLE, REPEATABLE READ, READ COMMITTED, got ''"),
        ),
        (
            "KAIROS_DISPATCH_ISOLATION",
            "AUTOCOMMIT",
            (
                "KAIROS_DISPATCH_ISOLATION must be one of SERIALIZABLE, "
                "REPEATABLE READ, READ COMMITTED or empty, got 'AUTOCOMMIT'"
            ),
        ),
        ("KAIROS_LEASE_TTL_S", "0", "KAIROS_LEASE_TTL_S must be a number > 0, got '0'"),
        ("KAIROS_LEASE_TTL_S", "nan", "KAIROS_LEASE_TTL_S must be a number > 0, got 'nan'"),
        ("KAIROS_DISPATCH_AHEAD_S", "-1", "KAIROS_DISPATCH_AHEAD_S must be a number >= 0, got '-1'"),
        ("KAIROS_DISPATCH_AHEAD_S", "inf", "KAIROS_DISPATCH_AHEAD_S must be a number >= 0, got 'inf'"),
        ("KAIROS_LOADER_NEAR_S", "soon", "KAIROS_LOADER_NEAR_S must be a number > 0, got 'soon'"),
        ("KAIROS_DEMO", "true", "KAIROS_DEMO must be 1, 0 or empty, got 'true'"),
        (
            "KAIROS_LOG_LEVEL",
            "LOUD",
            "KAIROS_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD'",
        ),
        ("KAIROS_LOG_FORMAT", "xml", "KAIROS_LOG_FORMAT must be one of json, text, got 'xml'"),
        ("KAIROS_HOME", "", "KAIROS_HOME must be a directory path, got ''"),
        ("KAIROS_API_HOST", " ", "KAIROS_API_HOST must be a non-empty string, got ' '"),
        (
            "KAIROS_DATABASE_URL",
            "mysql://db/kairos",
            (
                "KAIROS_DATABASE_URL must be empty or a postgresql://, "
                "postgres:// or cockroachdb:// URL, got 'mysql://db/kairos'"
            ),
        ),
    ],
)
def test_a_bad_value_names_the_variable_and_what_is_allowed(variable: str, value: str, message: str) -> None:
    with pytest.raises(InvalidSetting) as raised:
        load({variable: value})
    assert raised.value.variable == variable
    assert str(raised.value) == message


def test_worker_settings() -> None:
    assert load_worker({}) == WorkerSettings(
        grpc_addr="", grpc_host="127.0.0.1", grpc_port=50051, api_key="", log_level="INFO", log_format="json"
    )
    assert load_worker({}).executor_addr == "127.0.0.1:50051"
    w = load_worker({"KAIROS_GRPC_ADDR": "executor:50051", "KAIROS_API_KEY": "k", "KAIROS_LOG_LEVEL": "warning"})
    assert (w.executor_addr, w.api_key, w.log_level) == ("executor:50051", "k", "WARNING")
    with pytest.raises(InvalidSetting, match="KAIROS_GRPC_ADDR must be a non-empty string"):
        load_worker({"KAIROS_GRPC_ADDR": ""})


@pytest.mark.parametrize(
    ("variables", "addr"),
    [
        ({"KAIROS_GRPC_PORT": "6000"}, "127.0.0.1:6000"),
        ({"KAIROS_GRPC_HOST": "executor", "KAIROS_GRPC_PORT": "6000"}, "executor:6000"),
        ({"KAIROS_GRPC_HOST": "::1"}, "[::1]:50051"),
        (
            {"KAIROS_GRPC_ADDR": "elsewhere:7000", "KAIROS_GRPC_HOST": "executor", "KAIROS_GRPC_PORT": "6000"},
            "elsewhere:7000",
        ),
    ],
)
def test_the_worker_reads_the_executor_address_the_server_listens_on(variables: dict[str, str], addr: str) -> None:
    # One environment serves both sides: KAIROS_GRPC_HOST/PORT, unless KAIROS_GRPC_ADDR says otherwise.
    assert load_worker(variables).executor_addr == addr


def test_a_worker_port_must_be_one_it_can_connect_to() -> None:
    with pytest.raises(InvalidSetting, match="KAIROS_GRPC_PORT must be an integer 1-65535, got '0'"):
        load_worker({"KAIROS_GRPC_PORT": "0"})


def test_every_field_is_one_documented_variable() -> None:
    for cls in (Settings, WorkerSettings):
        variables = [f.metadata["variable"] for f in fields(cls)]
        assert len(variables) == len(set(variables))
        for f in fields(cls):
            assert f.metadata["variable"] == "KAIROS_" + f.name.upper(), f.name
            assert f.metadata["section"] in config.SECTIONS and f.metadata["doc"] and f.metadata["shown"]


def test_the_shard_count_is_fixed_not_a_setting() -> None:
    assert "shard_count" not in {f.name for f in fields(Settings)}
    assert "shard_count" not in {f.name for f in fields(LeaserConfig)}
    assert SHARD_COUNT == 256 and fair_share(["a", "b", "c"], "a") == 86


def test_docs_configuration_tables_are_the_settings() -> None:
    document = (ROOT / "docs" / "configuration.md").read_text()
    assert config_docs.render_docs(document) == document, (
        "docs/configuration.md is stale: run python -m app.config_docs --write docs/configuration.md"
    )


def test_render_docs_replaces_a_stale_table() -> None:
    stale = "".join(f"<!-- settings:{s} -->\n| old |\n<!-- /settings:{s} -->\n" for s in config.SECTIONS)
    rendered = config_docs.render_docs(stale)
    assert "| old |" not in rendered and "`KAIROS_DISPATCH_AHEAD_S` | `5` |" in rendered
    with pytest.raises(ValueError, match="settings:server"):
        config_docs.render_docs("no tables here")


def _environment_reads(source: str) -> list[int]:
    """Lines that touch ``os.environ`` or ``getenv``, except ``{**os.environ, ...}`` for a child process."""
    tree = ast.parse(source)
    passed_on = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if key is None
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if (
            (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"))
            or (isinstance(node, ast.Name) and node.id in ("environ", "getenv"))
        )
        and id(node) not in passed_on
    ]


def test_only_app_config_reads_the_environment() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line}"
        for path in sorted((ROOT / "app").rglob("*.py"))
        if path.name != "config.py" or path.parent.name != "app"
        for line in _environment_reads(path.read_text())
    ]
    assert found == []


def test_every_listening_port_binds_loopback_by_default() -> None:
    """One rule for the API, the worker protocol and the metrics ports (docs/observability.md)."""
    hosts = {f.metadata["variable"]: f.default for f in fields(Settings) if f.name.endswith("_host")}
    assert hosts == {
        "KAIROS_API_HOST": "127.0.0.1",
        "KAIROS_GRPC_HOST": "127.0.0.1",
        "KAIROS_METRICS_HOST": "127.0.0.1",
    }
    rule = (Path(__file__).parents[2] / "docs" / "observability.md").read_text()
    assert all(variable in rule for variable in hosts)
