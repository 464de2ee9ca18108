"""The namespace's two request nodes: ``$cbs`` (``put-token``: a token becomes a grant on the
connection) and ``$management`` (``READ`` of a hub or of a partition). Each request gets an
:class:`Answer`; sending it is the endpoint's business."""

from __future__ import annotations

from typing import Any, NamedTuple

from proton import UNDESCRIBED, Array, Data, Message, int32, timestamp

from ..tokens import InvalidToken
from .auth import ALL_RIGHTS, JWT_TOKEN_TYPE, SAS_TOKEN_TYPE, Grant, authorized
from .namespace import Namespace

HUB_TYPE = "com.microsoft:eventhub"
PARTITION_TYPE = "com.microsoft:partition"


class Answer(NamedTuple):
    status: int
    description: str
    body: Any = None


def plain(value: Any) -> Any:
    """proton / codec values → plain Python (symbols and AnnotationDict keys as str)."""
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, str) else k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, str):
        return str(value)
    return value


def put_token(ns: Namespace, grants: list[Grant], msg: Message) -> Answer:
    """``$cbs``: check the token; a valid one is added to ``grants`` (202), a bad one is 401."""
    props = plain(msg.properties or {})
    ns.stats["put_tokens"] += 1
    if props.get("operation") != "put-token":
        return Answer(400, f"Unsupported operation {props.get('operation')!r}.")
    token = msg.body
    if isinstance(token, (bytes, memoryview)):
        token = bytes(token).decode("utf-8", "replace")
    try:
        grant = ns.credentials.check(
            str(token or ""), str(props.get("type") or ""), str(props.get("name") or "")
        )
    except InvalidToken as exc:
        ns.stats["refused_tokens"] += 1
        return Answer(401, str(exc))
    grants.append(grant)
    return Answer(202, "Accepted")


def read(ns: Namespace, grants: list[Grant], msg: Message) -> Answer:
    """``$management``: the properties of a hub or of one of its partitions."""
    ns.stats["management_requests"] += 1
    props = plain(msg.properties or {})
    op, kind, name = props.get("operation"), props.get("type"), props.get("name")
    if op != "READ":
        return Answer(400, f"Unsupported operation {op!r}.")
    hub = ns.hub(str(name or ""))
    if hub is None:
        return Answer(404, f"The messaging entity '{name}' could not be found.")
    if not _may_read(ns, grants, hub, props.get("security_token")):
        return Answer(
            401,
            "Unauthorized access. 'Send', 'Listen' or 'Manage' claim(s) are "
            f"required to perform this operation. Resource: '{ns.resource(hub)}'.",
        )
    if kind == HUB_TYPE:
        return Answer(200, "OK", _hub_properties(ns, hub))
    if kind == PARTITION_TYPE:
        return _partition_properties(ns, hub, str(props.get("partition")))
    return Answer(400, f"Unsupported type {kind!r}.")


def _may_read(ns: Namespace, grants: list[Grant], hub: str, token: Any) -> bool:
    """Any right on the hub, from the connection's grants or the request's own token."""
    if any(authorized(grants, hub.lower(), right) for right in ALL_RIGHTS):
        return True
    if not token:
        return False
    token = str(token)
    token_type = SAS_TOKEN_TYPE if token.startswith("SharedAccessSignature") else JWT_TOKEN_TYPE
    try:
        return bool(ns.credentials.check(token, token_type, ns.resource(hub)).rights)
    except InvalidToken:
        return False


def _hub_properties(ns: Namespace, hub: str) -> dict[str, Any]:
    n = ns.hubs[hub]
    return {
        "name": hub,
        "type": HUB_TYPE,
        "created_at": timestamp(int(ns.created_at * 1000)),
        "partition_count": int32(n),
        # UNDESCRIBED: proton's documented "no descriptor", a Constant its annotation leaves out
        "partition_ids": Array(
            UNDESCRIBED,  # type: ignore[arg-type]
            Data.STRING,
            *[str(i) for i in range(n)],
        ),
    }


def _partition_properties(ns: Namespace, hub: str, pid: str) -> Answer:
    if not pid.isdigit() or int(pid) >= ns.hubs[hub]:
        return Answer(404, f"The specified partition '{pid}' is invalid.")
    last_seq, last_offset, last_time = ns.store.last_enqueued(hub, pid)
    begin = ns.store.begin_sequence_number(hub, pid)
    return Answer(
        200,
        "OK",
        {
            "name": hub,
            "type": PARTITION_TYPE,
            "partition": pid,
            "begin_sequence_number": begin if last_seq >= 0 else -1,
            "last_enqueued_sequence_number": last_seq,
            "last_enqueued_offset": str(last_offset),
            "last_enqueued_time_utc": timestamp(int(last_time * 1000)),
            "is_partition_empty": begin > last_seq,
        },
    )
