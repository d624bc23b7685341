"""GitHub App authentication: a JWT signed with the App's key buys an installation token.

GitHub's documented flow: a JWT (RS256; ``iat`` a minute in the past for clock drift, ``exp`` at
most ten minutes ahead, ``iss`` the App's id) authenticates as the App for
``POST /app/installations/{installation_id}/access_tokens``, whose ``token`` (valid for an hour,
until ``expires_at``) authenticates the check-runs API. Tokens are cached until a minute before
they expire. ``cryptography`` (the service extra) signs; it is imported only when an App is set.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from datetime import datetime

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def app_jwt(app_id: int, private_key_pem: str, now: float | None = None) -> str:
    """The App's JWT (RS256 over ``header.payload``, base64url without padding)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the GitHub App private key must be an RSA key (PEM)")
    issued = int(now if now is not None else time.time())
    header = {"alg": "RS256", "typ": "JWT"}
    payload = {"iat": issued - 60, "exp": issued + 540, "iss": str(app_id)}
    signing_input = ".".join(
        _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, payload)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


class AppAuth:
    """Installation tokens for one App installation, fetched when needed and cached."""

    def __init__(self, api_url: str, app_id: int, private_key_pem: str, installation: int) -> None:
        self.api = api_url.rstrip("/")
        self.app_id = app_id
        # an environment variable often carries the PEM's newlines as the two characters "\n"
        self.pem = private_key_pem.replace("\\n", "\n")
        self.installation = installation
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.time() > self._expires - 60:
                self._token, self._expires = self._fetch()
            return self._token

    def _fetch(self) -> tuple[str, float]:
        import httpx  # here, not at the top: only a service with a GitHub App needs it

        url = f"{self.api}/app/installations/{self.installation}/access_tokens"
        headers = {**HEADERS, "Authorization": f"Bearer {app_jwt(self.app_id, self.pem)}"}
        resp = httpx.post(url, headers=headers, timeout=15)
        resp.raise_for_status()
        body = resp.json()
        expires = body.get("expires_at")
        when = (
            datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
            if isinstance(expires, str)
            else time.time() + 3000
        )
        return str(body["token"]), when
