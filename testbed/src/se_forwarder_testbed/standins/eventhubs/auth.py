"""Who may do what in the namespace: SAS tokens signed with a policy's key, JWTs from the
:class:`~se_forwarder_testbed.standins.tokens.TokenAuthority`, and the grants a connection
holds once its ``put-token`` was accepted."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from ..tokens import EVENTHUBS_AUDIENCE, InvalidToken, TokenAuthority

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
DATA_SENDER_ROLE = "Azure Event Hubs Data Sender"
DATA_RECEIVER_ROLE = "Azure Event Hubs Data Receiver"
SAS_PREFIX = "SharedAccessSignature "
ALL_RIGHTS = ("Send", "Listen", "Manage")

SasKeys = dict[str, str | tuple[str, Iterable[str]]]


@dataclass
class Grant:
    """What one accepted token allows, on which entity, until when."""

    scope: str  # entity path the token covers ("" = the whole namespace)
    rights: frozenset[str]
    expires_at: float
    who: str


def _signature(resource: str, key: str, expiry: int | str) -> str:
    """HMAC-SHA256 of the URL-encoded resource and the expiry, base64: what ``sig`` must hold."""
    return base64.b64encode(
        hmac.new(
            key.encode("utf-8"),
            f"{urllib.parse.quote_plus(resource)}\n{expiry}".encode(),
            hashlib.sha256,
        ).digest()
    ).decode()


def make_sas_token(resource: str, key_name: str, key: str, expiry: float | None = None) -> str:
    """A SAS token as the SDKs make it (``SharedAccessSignature sr=…&sig=…&se=…&skn=…``)."""
    se = int(time.time() + 3600 if expiry is None else expiry)
    return SAS_PREFIX + urllib.parse.urlencode(
        {"sr": resource, "sig": _signature(resource, key, se), "se": str(se), "skn": key_name}
    )


def entity_path(uri: str) -> str:
    """``sb://host:port/hub/Partitions/0`` → ``hub/Partitions/0`` (lower-cased, no slashes
    around)."""
    if "://" in uri:
        uri = urllib.parse.urlsplit(uri).path
    return urllib.parse.unquote(uri).strip("/").lower()


def covers(scope: str, entity: str) -> bool:
    return scope == "" or entity == scope or entity.startswith(scope + "/")


def authorized(grants: Iterable[Grant], entity: str, right: str) -> bool:
    """Whether an unexpired grant gives ``right`` on ``entity``."""
    now = time.time()
    return any(g.expires_at > now and right in g.rights and covers(g.scope, entity) for g in grants)


def _default_keys() -> SasKeys:
    return {
        "RootManageSharedAccessKey": base64.b64encode(
            hashlib.sha256(b"se-forwarder stand-in").digest()
        ).decode()
    }


class Credentials:
    """The namespace's SAS policies, its JWT issuer and the subjects holding the Data Sender
    (``allowed_subjects``) and Data Receiver (``receiver_subjects``) roles.

    ``sas_keys`` maps a policy name to its key, or to ``(key, rights)`` (a bare key has every
    right); a subject set None means every subject with a valid JWT holds that role."""

    def __init__(
        self,
        sas_keys: SasKeys | None,
        token_authority: TokenAuthority | None,
        allowed_subjects: Iterable[str] | None,
        receiver_subjects: Iterable[str] | None = None,
    ) -> None:
        self.sas: dict[str, tuple[str, frozenset[str]]] = {}
        for name, v in (sas_keys if sas_keys is not None else _default_keys()).items():
            key, rights = (v, ALL_RIGHTS) if isinstance(v, str) else v
            self.sas[name] = (key, frozenset(rights))
        self.token_authority = token_authority
        self.allowed_subjects = None if allowed_subjects is None else frozenset(allowed_subjects)
        self.receiver_subjects = None if receiver_subjects is None else frozenset(receiver_subjects)

    def key(self, key_name: str | None) -> tuple[str, str]:
        """A policy's name and key (the first policy when ``key_name`` is None)."""
        key_name = key_name or next(iter(self.sas))
        return key_name, self.sas[key_name][0]

    def check(self, token: str, token_type: str, name: str) -> Grant:
        """The grant a ``put-token`` of ``token`` for the audience ``name`` earns; InvalidToken
        (whose message the service would answer) when it earns none."""
        audience_entity = entity_path(name)
        if token_type == SAS_TOKEN_TYPE or token.startswith(SAS_PREFIX):
            return self._check_sas(token, audience_entity)
        if token_type == JWT_TOKEN_TYPE:
            return self._check_jwt(token, audience_entity)
        raise InvalidToken(f"InvalidTokenType: token type {token_type!r} is not supported.")

    def _check_jwt(self, token: str, audience_entity: str) -> Grant:
        if self.token_authority is None:
            raise InvalidToken("InvalidIssuer: JWT tokens are not accepted by this namespace.")
        try:
            claims = self.token_authority.verify(token, EVENTHUBS_AUDIENCE)
        except InvalidToken as exc:
            raise InvalidToken(f"InvalidToken: {exc}.") from None
        subject = str(claims.get("sub"))
        rights = set()
        if self.allowed_subjects is None or subject in self.allowed_subjects:
            rights.add("Send")
        if self.receiver_subjects is None or subject in self.receiver_subjects:
            rights.add("Listen")
        return Grant(audience_entity, frozenset(rights), float(claims["exp"]), f"jwt:{subject}")

    def _check_sas(self, token: str, audience_entity: str) -> Grant:
        if not token.startswith(SAS_PREFIX):
            raise InvalidToken("MalformedToken: not a SharedAccessSignature.")
        fields = dict(urllib.parse.parse_qsl(token[len(SAS_PREFIX) :], keep_blank_values=True))
        sr, sig, se, skn = (fields.get(k) for k in ("sr", "sig", "se", "skn"))
        if not (sr and sig and se and skn):
            raise InvalidToken("MalformedToken: the token needs sr, sig, se and skn.")
        entry = self.sas.get(skn)
        if entry is None:
            raise InvalidToken(f"InvalidSignature: unknown key name '{skn}'.")
        key, rights = entry
        if not hmac.compare_digest(_signature(sr, key, se), sig):
            raise InvalidToken("InvalidSignature: The token has an invalid signature.")
        try:
            expires = float(se)
        except ValueError:
            raise InvalidToken("MalformedToken: se is not a number.") from None
        if expires <= time.time():
            raise InvalidToken(
                f"ExpiredToken: The token is expired. Expiration time: '{int(expires)}'."
            )
        if not covers(entity_path(sr), audience_entity):
            raise InvalidToken(
                f"InvalidAudience: the token is for '{sr}', not for the entity '{audience_entity}'."
            )
        return Grant(audience_entity, rights, expires, f"sas:{skn}")
