"""The demo of `kairos up --demo` (app.cli.supervisor): its tenant, its egress allow-list and its job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from app.cli._up_ports import StartFailed
from app.config import Settings
from app.store import Database, Store

DEMO_TENANT = "demo"


@dataclass(frozen=True)
class DemoTenant:
    key: str  # its API key (Bearer), for REST and gRPC
    signing_secret: str  # keys the Kairos-Signature header of its HTTP deliveries


async def ensure_demo_tenant(db: Database, home: Path) -> DemoTenant:
    """The demo tenant's key and signing secret; the key is kept in KAIROS_HOME/demo.key (0600) because
    only its hash is stored."""
    from app.store.tenants import signing_secrets_of  # the secret is stored sealed (app.store.sealing)

    key_file = home / "demo.key"

    async def work(tx: Store) -> DemoTenant:
        tenant = await tx.tenants.get_by_name(DEMO_TENANT)
        if tenant is None:
            created = await tx.tenants.create(DEMO_TENANT)
            assert created is not None
            return DemoTenant(created[1], signing_secrets_of(created[0]).current)
        if key_file.exists():
            key = key_file.read_text().strip()
            principal = await tx.tenants.resolve_key(key)
            if principal is not None and principal.tenant_id == tenant.tenant_id:
                return DemoTenant(key, signing_secrets_of(tenant).current)
        key, _ = await tx.tenants.rotate_key(tenant.tenant_id)
        return DemoTenant(key, signing_secrets_of(tenant).current)

    demo = await db.transaction(work)
    key_file.write_text(demo.key + "\n")
    key_file.chmod(0o600)
    return demo


async def submit_demo_job(settings: Settings, key: str) -> dict[str, object]:
    """The demo job, submitted through the API; StartFailed with the API's answer when it is refused."""
    body = {
        "name": "demo-echo",
        "target": {"type": "http", "ref": f"{settings.api_url}/demo/echo"},
        "payload": {"hello": "from kairos up --demo"},
        "schedule": {"delaySeconds": 3},
    }
    async with httpx.AsyncClient(timeout=5.0) as client:
        try:
            resp = await client.post(
                f"{settings.api_url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"}
            )
        except httpx.HTTPError as exc:
            raise StartFailed(f"the demo job could not be submitted: {type(exc).__name__}") from None
        if resp.status_code != 201:
            try:
                detail = resp.json().get("detail", "")
            except ValueError:
                detail = resp.text[:200]
            raise StartFailed(f"the demo job was refused: {resp.status_code} {detail}".rstrip())
        created: dict[str, object] = resp.json()
        return created


def demo_allow_list(settings: Settings) -> str:
    """KAIROS_HTTP_EGRESS_ALLOW for the children of `kairos up --demo`: the user's entries and the API's own
    port, to which the demo job posts (that one loopback port, not every one)."""
    own = f"127.0.0.1:{settings.api_port}"
    return ",".join(dict.fromkeys([*settings.http_egress_allow, own]))
