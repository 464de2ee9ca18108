"""How the service answers an error: a status with a ``{"error": {"code", "message"}}`` body,
and for a 401 the Bearer challenge."""

from __future__ import annotations


def error(code: str, message: str) -> dict[str, dict[str, str]]:
    """The service's error body."""
    return {"error": {"code": code, "message": message}}


def www_authenticate(reason: str) -> str:
    """The ``WWW-Authenticate`` header of a 401, naming why the token was refused."""
    reason = reason.replace('"', "'")
    return (
        'Bearer authorization_uri="https://login.microsoftonline.com/common/oauth2/authorize", '
        f'error="invalid_token", error_description="{reason}"'
    )


class Answer(Exception):
    """Raised where a check fails: the request ends with this answer."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}

    @property
    def payload(self) -> dict[str, dict[str, str]]:
        return error(self.code, self.message)
