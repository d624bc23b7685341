"""``fe-ci pin``: show or re-pin the comparison points of a running service (admin token), one
per subject and cell of the matrix (``--cell sm_90-cudnn9.28.1``; ``--family sm_90`` is the
family's host cell)."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import typer

from cli.common import EXIT_BAD_INPUT, EXIT_NO_VERDICT, fail, runner_settings
from core import cells


def _line(pin: dict[str, Any]) -> str:
    state = "in force" if pin["in_force"] else f"retired {pin['retired_at']}"
    stale = "" if pin["definition_current"] else " (made for an earlier definition)"
    return (
        f"{pin.get('cell') or pin['family']} {pin['subject']} "
        f"series {pin['series']}: {pin['config']} "
        f"[{pin['source']}, {state}{stale}] {pin['reason']}"
    )


def pin(
    subject: Annotated[
        str | None, typer.Argument(metavar="SUBJECT", show_default=False, hidden=True)
    ] = None,
    config: Annotated[
        str | None, typer.Argument(metavar="CONFIG", show_default=False, hidden=True)
    ] = None,
    family: Annotated[
        str | None,
        typer.Option(metavar="FAMILY", help="sm_80, sm_90 or sm_100: the family's host cell"),
    ] = None,
    cell: Annotated[
        str | None,
        typer.Option(metavar="CELL", help="a cell of the matrix: sm_90, sm_90-cudnn9.28.1"),
    ] = None,
    reason: Annotated[str, typer.Option(metavar="WHY", help="why, kept with the new series")] = "",
    measure: Annotated[
        bool,
        typer.Option("--measure", help="retire the pin: the next robust measurement chooses"),
    ] = False,
) -> None:
    """List comparison points, or re-pin SUBJECT on --cell at CONFIG: a new series starts there.

    \b
    fe-ci pin                                   every series of every subject and cell
    fe-ci pin --cell sm_90-cudnn9.28.1          the series of one cell
    fe-ci pin sdpa_bwd b8_h16_s4096_d128_causal --cell sm_90-cudnn9.28.1 --reason "..."
    fe-ci pin sdpa_bwd b8_h16_s4096_d128_causal --family sm_90   the host cell, sm_90
    fe-ci pin sdpa_bwd --family sm_90 --measure  the next robust measurement chooses again
    SUBJECT: the subject, e.g. sdpa_bwd; CONFIG: one of its configs (fe-ci configs SUBJECT).
    Exit codes: 0 done; 3 the service away, refusing the admin token or failing; 4 bad input.
    """
    if family is not None and cell is not None:
        raise fail("give --cell or --family, not both (--family names the family's host cell)")
    where = cell if cell is not None else family
    if where is not None and not cells.is_cell(where):
        raise fail(f"{where!r} is not a cell (sm_90, or sm_90-cudnn9.28.1)")
    s = runner_settings()
    with httpx.Client(base_url=s.url, timeout=60.0) as http:
        try:
            if subject is None:
                resp = http.get("/api/pins", params={"cell": where} if where else None)
                if resp.status_code != 200:
                    raise fail(
                        f"the service answered {resp.status_code}: {resp.text}", EXIT_NO_VERDICT
                    )
                for item in resp.json()["items"]:
                    typer.echo(_line(item))
                return
            if where is None or (config is None) == (not measure):
                raise fail("give --cell (or --family) and either CONFIG or --measure")
            token = s.token("admin_token")
            if not token:
                raise fail("set FE_CI_ADMIN_TOKEN (or run beside the service's data directory)")
            resp = http.post(
                f"/api/pins/{where}/{subject}",
                json={"config": config, "reason": reason},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.TransportError as exc:
            raise fail(f"cannot reach the service at {s.url}: {exc}", EXIT_NO_VERDICT) from exc
    if resp.status_code != 201:
        try:
            message = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = resp.text
        bad_input = 400 <= resp.status_code < 500 and resp.status_code not in (401, 403)
        code = EXIT_BAD_INPUT if bad_input else EXIT_NO_VERDICT
        raise fail(f"the service refused the re-pin ({resp.status_code}): {message}", code)
    body = resp.json()
    if body.get("retired"):
        typer.echo(f"retired: {_line(body['retired'])}")
    typer.echo(f"now:     {_line(body['pin'])}" if body.get("pin") else "now:     none")
