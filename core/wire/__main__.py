"""``python -m core.wire``: the build report's JSON schema (what ``GET /api/builds/{id}`` answers),
as ``docs/report-schema.json`` holds it."""

from __future__ import annotations

import json

from core.wire import BuildReport


def schema_text() -> str:
    return json.dumps(BuildReport.model_json_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
