"""Submit and delivery apply one egress normalisation (app.domain.egress.normalize_host): percent-encoded
hosts, IDNA (full-width digits and dots) and trailing dots read the same at both, so a URL the API accepts
is one the delivery accepts, and a URL the delivery would refuse is refused at submit with a 422. Every port
of the installation (kairos up's children and kairos api's supervisor included) is known to the API."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.config import load
from app.domain.egress import EgressPolicy, normalize_host
from app.domain.jobs import validate_target
from app.errors import EgressRefused, InvalidInput
from app.executor.delivery_egress import own_ports, resolve

PORT = 19464  # a port of the installation (a scheduler's metrics port, say)


def submit_refuses(url: str, policy: EgressPolicy) -> bool:
    try:
        validate_target("http", url, policy)
    except InvalidInput:
        return True
    return False


async def delivery_refuses(url: str, policy: EgressPolicy) -> bool:
    """As the HTTP pool reads a target: httpx's host and port, then the egress check."""
    parsed = httpx.URL(url)
    try:
        await resolve(policy, parsed.host, parsed.port or 80)
    except EgressRefused:
        return True
    return False


@pytest.mark.parametrize(
    "host",
    [
        "127。0。0。1",
        "127．0．0．1",
        "127｡0｡0｡1",
        "%31%32%37.0.0.1",
        "%31%32%37%2e0.0.1",
        "127.0.0.1.",
        "LOCALHOST。",
        "0x7f.1",
    ],
)
def test_spellings_of_loopback_normalise_to_it(host: str) -> None:
    assert normalize_host(host) in ("127.0.0.1", "localhost", "0x7f.1")


@pytest.mark.parametrize(
    "url",
    [
        f"http://127。0。0。1:{PORT}/",
        "http://127。0。0。1/",
        "http://%31%32%37.0.0.1/",
        "http://127．0．0．1/",
        "http://LOCALHOST。:8080/",
        "http://%6c%6fcalhost/",
    ],
)
async def test_submit_and_delivery_both_refuse_internal_spellings(url: str) -> None:
    policy = EgressPolicy.from_allow_list([], own_ports={PORT})
    assert submit_refuses(url, policy), url
    assert await delivery_refuses(url, policy), url


@pytest.mark.parametrize("host", ["127。0。0。1", "%31%32%37.0.0.1", "127.0.0.1"])
async def test_with_loopback_allowed_the_installations_ports_stay_refused_at_both(host: str) -> None:
    policy = EgressPolicy.from_allow_list(["127.0.0.1"], own_ports={PORT})
    assert submit_refuses(f"http://{host}:{PORT}/", policy)
    assert await delivery_refuses(f"http://{host}:{PORT}/", policy)
    assert not submit_refuses(f"http://{host}:8081/", policy)
    assert not await delivery_refuses(f"http://{host}:8081/", policy)


def test_a_host_that_is_no_host_name_is_refused_at_submit() -> None:
    for url in ("http://exa%zzmple.com/", "http://%2525.example/", "http://a%00b.example/"):
        with pytest.raises(InvalidInput) as refused:
            validate_target("http", url, EgressPolicy())
        assert refused.value.field == "target.ref"


def test_kairos_up_tells_every_child_every_port_of_the_installation(tmp_path: Path) -> None:
    from app.cli.supervisor import Supervisor, SupervisorConfig

    settings = load(
        {
            "KAIROS_HOME": str(tmp_path),
            "KAIROS_API_PORT": "18080",
            "KAIROS_GRPC_PORT": "15051",
            "KAIROS_METRICS_PORT": str(PORT),
        }
    )
    sup = Supervisor(settings, "postgresql://u@db.internal:6543/k", SupervisorConfig(), {})
    child = load({k: v for k, v in sup.env.items() if k.startswith("KAIROS_")} | {"KAIROS_METRICS_PORT": "0"})
    assert {18080, 15051, PORT, PORT + 1, PORT + 2, 6543} <= own_ports(child)


def test_under_the_demo_the_api_port_stays_reachable_though_the_installation_lists_it(tmp_path: Path) -> None:
    from app.cli.supervisor import Supervisor, SupervisorConfig

    settings = load({"KAIROS_HOME": str(tmp_path), "KAIROS_API_PORT": "18080", "KAIROS_METRICS_PORT": str(PORT)})
    sup = Supervisor(settings, "postgresql://u@db.internal:6543/k", SupervisorConfig(), {"KAIROS_DEMO": "1"})
    # A child inherits the run's environment (its KAIROS_API_PORT too) and the supervisor's additions.
    child = load({k: v for k, v in sup.env.items() if k.startswith("KAIROS_")} | {"KAIROS_API_PORT": "18080"})
    assert 18080 not in own_ports(child) and PORT in own_ports(child)
