"""Screenshots of the dashboard over a database that a real run left behind, or a seeded one.

    .venv/bin/python bench/page_shots.py --db fe-ci.sqlite3 --out DIR [--page /trends ...]
        [--first-screen]

Copies the SQLite database (``bench/gpu_builds.py --keep-db`` writes one) into a temp data dir,
starts a real ``fe-ci serve`` on it (its migrations run first, so an older database is brought to
this checkout's schema; the copy given is never touched), and saves a full-page PNG of each page
from a headless Chromium (Debian's, ``FE_CI_CHROMIUM``). Default pages: the grid, the trends page
and every build's page. ``--first-screen`` shoots what a reader first sees, the window alone
(1280x800 by default: a build's page holds its verdict, gate, causes and what did not run there).
``--seed`` starts from an empty database instead and seeds it as the width test does
(``testkit.dashboard_data``: twenty builds of different wheels, a bisection and stage logs); its
pages are the grid, the failing build, an incomplete one (its gate neutral), a waiting one,
trends, runners, the bisection and a comparison. The committed shots at both widths:

    .venv/bin/python bench/page_shots.py --seed --out docs/screenshots --width 360 --prefix 360-
    .venv/bin/python bench/page_shots.py --seed --out docs/screenshots --width 1280 --prefix 1280-
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.service import Service, service_env  # noqa: E402

CHROMIUM = Path(os.environ.get("FE_CI_CHROMIUM", "/usr/bin/chromium"))


def path_name(path: str) -> str:
    return path.strip("/").replace("/", "-") or "grid"


def default_pages(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM builds ORDER BY id")]
    return ["/", "/trends", *(f"/builds/{i}" for i in ids)]


def seed(data: Path) -> list[str]:
    """Seed an empty service's database as the browser tests do (tests/functional/
    test_pages_widths.py: twenty builds of different wheels); the pages worth a picture."""
    from datetime import timedelta

    from service.db import make_engine
    from testkit.dashboard_data import seed_all
    from testkit.dashboard_data.extras import seed_bisection, seed_logs, vary_wheels

    engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
    try:
        ids = seed_all(engine, history=9, lease=timedelta(hours=1))
        bisection = seed_bisection(engine, ids["pass"], ids["fail"])
        seed_logs(engine, ids["fail"])
        vary_wheels(engine, ids)
    finally:
        engine.dispose()
    SEEDED_NAMES.update({f"/builds/{ids['waiting']}": "build-waiting"})
    SEEDED_NAMES.update({f"/builds/{ids['incomplete']}": "build-neutral"})
    return [
        "/",
        f"/builds/{ids['fail']}",
        f"/builds/{ids['incomplete']}",
        f"/builds/{ids['waiting']}",
        "/trends",
        "/runners",
        f"/bisections/{bisection}",
        f"/compare?a={ids['pass']}&b={ids['fail']}",
    ]


SEEDED_NAMES: dict[str, str] = {}  # a seeded page's file name where its kind has several


def shot_name(path: str) -> str:
    if path in SEEDED_NAMES:
        return SEEDED_NAMES[path]
    if path.startswith("/compare"):
        return "compare"
    name = path.strip("/").replace("/", "-") or "grid"
    return {"builds": "build", "bisections": "bisection"}.get(name.split("-")[0], name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", type=Path)
    where.add_argument("--seed", action="store_true", help="seed an empty database instead")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--page", action="append", help="a path to shoot (repeatable)")
    parser.add_argument("--width", type=int, default=None, help="default 1400, 1280 first screen")
    parser.add_argument("--first-screen", action="store_true", help="the window only (x800)")
    parser.add_argument("--prefix", default="", help="put before each file name")
    args = parser.parse_args()
    width = args.width or (1280 if args.first_screen else 1400)
    height = 800 if args.first_screen else 900
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fe-ci-shots-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        if args.db is not None:
            shutil.copyfile(args.db, data / "fe-ci.sqlite3")
            pages = args.page or default_pages(data / "fe-ci.sqlite3")
        svc = Service(data_dir=data, env=service_env(data)).start()
        if args.seed:
            pages = [*seed(data), *(args.page or [])]
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=str(CHROMIUM),
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
                )
                page = browser.new_page(viewport={"width": width, "height": height})
                for path in pages:
                    page.goto(f"{svc.url}{path}")
                    page.wait_for_load_state("networkidle")
                    name = args.prefix + (shot_name(path) if args.seed else path_name(path))
                    shot = args.out / f"{name}.png"
                    page.screenshot(path=str(shot), full_page=not args.first_screen)
                    print(f"{path} -> {shot}")
                browser.close()
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
