"""/dashboard: the web page over the read routes (static files in app/api/web, package data).

The page asks for a tenant's API key or the operator's admin token, keeps it in the tab's
sessionStorage and sends it as a Bearer token to /v1/status, /v1/stats/*, /v1/jobs and the history
routes; the server keeps nothing about the session. Its scripts are ours and plotly.js's basic bundle,
shipped beside them as package data (app.api.assets), so the Content-Security-Policy allows this origin
only: nothing is loaded from elsewhere, and no inline script runs.
"""

from __future__ import annotations

from litestar import Controller, Response, get
from litestar.params import FromPath
from litestar.response import File

from app.api import assets

# plotly.js writes <style> elements and style attributes, hence 'unsafe-inline' for styles only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)


class DashboardController(Controller):
    path = "/dashboard"
    include_in_schema = False

    @get("/", media_type="text/html")
    async def page(self) -> Response[bytes]:
        return assets.page(
            "index.html", {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Referrer-Policy": "no-referrer"}
        )

    @get("/assets/{name:str}")
    async def asset(self, name: FromPath[str]) -> File:
        return assets.serve(assets.DASHBOARD, name)
