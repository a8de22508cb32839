"""`kairos api`: the Litestar app on uvicorn until stopped."""

from __future__ import annotations

import asyncio
import logging

import uvicorn

from app.api.app import create_app
from app.config import Settings
from app.store.db import Database

log = logging.getLogger(__name__)


async def serve(settings: Settings, db: Database, stop: asyncio.Event) -> None:
    config = uvicorn.Config(create_app(settings, db), host=settings.api_host, port=settings.api_port,
                            log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(), name="uvicorn")
    stopping = asyncio.create_task(stop.wait(), name="api-stop")
    log.info("api listening", extra={"url": settings.api_url})
    done, _ = await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    await serving
    stopping.cancel()
