"""Access tokens shared by the stand-ins: the managed-identity endpoint (in the IMDS simulator)
issues them, the Logs Ingestion and Event Hubs stand-ins verify them.

Tokens are JWT-shaped (header.claims.signature, base64url) and signed with HMAC-SHA256 under a key
the stand-ins share (in one process, or through a key file), so a stand-in can tell a token it
issued for its audience from a forged, expired or wrong-audience one, as Entra ID would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

MONITOR_AUDIENCE = "https://monitor.azure.com"
EVENTHUBS_AUDIENCE = "https://eventhubs.azure.net"
STORAGE_AUDIENCE = "https://storage.azure.com"
# Entra ID's issuer form (a tenant of zeros): Azurite's OAuth check reads iss, nbf, iat and exp.
ISSUER = "https://sts.windows.net/00000000-0000-0000-0000-000000000000/"


class InvalidToken(Exception):
    """Why a token was refused, in one line (the stand-in puts it in its 401 answer)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenAuthority:
    def __init__(self, key: bytes | None = None) -> None:
        self.key = key or secrets.token_bytes(32)

    @classmethod
    def from_key_file(cls, path: str | os.PathLike[str]) -> TokenAuthority:
        """Load the shared key, creating it (mode 0600) if the file does not exist yet."""
        p = Path(path)
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return cls(bytes.fromhex(p.read_text().strip()))

    def issue(
        self,
        audience: str,
        *,
        subject: str = "system-assigned",
        lifetime: int = 3600,
        now: float | None = None,
    ) -> tuple[str, int]:
        """Return (token, expires_on epoch seconds)."""
        now = time.time() if now is None else now
        exp = int(now) + lifetime
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = _b64(
            json.dumps(
                {
                    "aud": audience.rstrip("/"),
                    "iss": ISSUER,
                    "sub": subject,
                    "exp": exp,
                    "iat": int(now),
                    "nbf": int(now),
                },
                separators=(",", ":"),
            ).encode()
        )
        sig = _b64(hmac.new(self.key, f"{header}.{claims}".encode(), hashlib.sha256).digest())
        return f"{header}.{claims}.{sig}", exp

    def verify(self, token: str, audience: str, *, now: float | None = None) -> dict[str, Any]:
        """Return the token's claims, or raise InvalidToken saying why."""
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("token is not a JWT")
        expected = hmac.new(self.key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        try:
            signature = _unb64(parts[2])
            claims: dict[str, Any] = json.loads(_unb64(parts[1]))
        except (ValueError, json.JSONDecodeError) as exc:
            raise InvalidToken("token is not a JWT") from exc
        if not hmac.compare_digest(expected, signature):
            raise InvalidToken("token signature is invalid")
        if claims.get("aud") != audience.rstrip("/"):
            raise InvalidToken(f"token audience {claims.get('aud')!r} is not {audience!r}")
        if claims.get("exp", 0) < (time.time() if now is None else now):
            raise InvalidToken("token has expired")
        return claims
