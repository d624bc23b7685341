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


def install_api_docs(app: FastAPI) -> None:
    """Call with an app created with ``docs_url=None, redoc_url=None``."""
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def read_api_docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=_ASSETS.format("swagger-ui-bundle.js"),
            swagger_css_url=_ASSETS.format("swagger-ui.css"),
            swagger_favicon_url="/favicon.ico",
            # no call to the public validator service for a badge
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/favicon.ico", include_in_schema=False)
    def read_favicon() -> FileResponse:
        return FileResponse(
            FAVICON,
            media_type="image/vnd.microsoft.icon",
            headers={"Cache-Control": "public, max-age=86400"},
        )
