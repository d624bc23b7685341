"""``python -m tests.tap TAPFILE runner [...]``: the real ``fe-ci`` runner, whose protocol client
also appends each lease it is given (with its own runner token) to TAPFILE as a JSON line.

The service stores only hashes of tokens, so this is how a test holds a runner's lease token after
killing that runner, to replay its late posts. Everything else is the unchanged runner process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cli import main
from core.wire import JobLease
from runner.agent.client import Client


def _tap(path: Path) -> None:
    claim = Client.claim

    def tapped_claim(self: Client, wait_s: float = 0.0) -> JobLease | None:
        lease = claim(self, wait_s)
        if lease is not None:
            line = {"runner_token": self.token, "lease": lease.model_dump(mode="json")}
            with path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
        return lease

    Client.claim = tapped_claim  # type: ignore[method-assign]


def read_tap(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    _tap(Path(sys.argv.pop(1)))
    main.main()
