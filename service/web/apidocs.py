"""``/docs`` (Swagger UI) and ``/favicon.ico``, both served from the service's own static files.

FastAPI's default ``/docs`` loads Swagger UI from a CDN and is a blank page on a machine without
internet access; here the assets are a pinned copy of ``swagger-ui-dist`` (see
``static/swagger-ui/README.md``). ReDoc, which would need a CDN too, is not offered.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from service.web.templating import HERE

SWAGGER_UI_VERSION = "5.35.0"
_ASSETS = f"/static/swagger-ui/{{}}?v={SWAGGER_UI_VERSION}"
FAVICON = HERE / "static" / "favicon.ico"
# The way back from the API page to the dashboard, above Swagger UI's own header.
BACK = (
    '<nav id="back-to-dashboard" style="font: 14px sans-serif; padding: 8px 20px; '
    'background: #1d2430"><a href="/" style="color: #dde3ec">&larr; fe-ci dashboard</a> '
    '<a href="/runners" style="color: #dde3ec; margin-left: 12px">runners</a></nav>'
)


def install_api_docs(app: FastAPI) -> None:
    """Call with an app created with ``docs_url=None, redoc_url=None``."""
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def read_api_docs() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=_ASSETS.format("swagger-ui-bundle.js"),
            swagger_css_url=_ASSETS.format("swagger-ui.css"),
            swagger_favicon_url="/favicon.ico",
            # no call to the public validator service for a badge
            swagger_ui_parameters={"validatorUrl": None},
        )
        html = bytes(page.body).decode().replace("<body>", f"<body>\n{BACK}", 1)
        return HTMLResponse(html)

    @app.get("/favicon.ico", include_in_schema=False)
    def read_favicon() -> FileResponse:
        return FileResponse(
            FAVICON,
            media_type="image/vnd.microsoft.icon",
            headers={"Cache-Control": "public, max-age=86400"},
        )
