"""Attacks on a real ``fe-ci serve`` on 127.0.0.1: a zip whose central directory is larger than its
end record says, slow and vanishing clients, too many uploads at once, HEAD and page headers."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx

from bench.zip_bomb import make_directory_bomb
from service import wheelcheck
from tests.conftest import SUBMIT, Service


def post_wheel(svc: Service, wheel: Path) -> httpx.Response:
    with svc.http() as http, wheel.open("rb") as fh:
        return http.post("/validate", files={"wheel": (wheel.name, fh)})


def blobs(svc: Service) -> list[Path]:
    return sorted((svc.data_dir / "blobs").rglob("*.whl"))


def assert_refused(resp: httpx.Response, status: int, code: str, check: str) -> str:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] == code and error["detail"]["check"] == check, error
    return str(error["message"])


# ---------------------------------------------------------------- the central directory


def test_a_directory_with_more_entries_than_its_end_record_says_is_refused(
    service: Service, tmp_path: Path
) -> None:
    """Was accepted (202): the cap read the end record's count, ``zipfile`` then walked all."""
    wheel = make_directory_bomb(tmp_path, members=1_000, declared=100)
    message = assert_refused(post_wheel(service, wheel), 422, "unsafe_wheel", "member_count")
    assert "the end record says 100" in message
    assert service.count("builds") == 0 and blobs(service) == []


def test_a_directory_past_its_byte_bound_is_refused_before_it_is_walked(
    service: Service, tmp_path: Path
) -> None:
    """The 2,000,000-member attack in small: the directory's size alone refuses it."""
    members = wheelcheck.MAX_DIRECTORY_BYTES // (46 + 13) + 1_000
    wheel = make_directory_bomb(tmp_path, members=members, declared=100)
    message = assert_refused(post_wheel(service, wheel), 422, "unsafe_wheel", "directory_size")
    assert f"at most {wheelcheck.MAX_DIRECTORY_BYTES}" in message
    assert service.count("builds") == 0 and blobs(service) == []


def test_an_honest_hand_written_directory_is_accepted(service: Service, tmp_path: Path) -> None:
    """The builder above makes valid wheels when it does not lie: the refusals are the lie's."""
    wheel = make_directory_bomb(tmp_path, members=1_000, declared=1_002)
    resp = post_wheel(service, wheel)
    assert resp.status_code == 202, resp.text
    assert len(blobs(service)) == 1
