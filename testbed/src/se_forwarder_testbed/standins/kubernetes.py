"""A Kubernetes API server stand-in, over HTTPS with a bearer token, for the node agent's calls.

What it answers (the paths and bodies of the Kubernetes API reference; the rules in
``kube_cluster.py``):

=======  =======================================================  ===============================
method   path                                                     answers
=======  =======================================================  ===============================
GET      ``/api/v1/nodes/{name}``                                 the Node; 404
PATCH    ``/api/v1/nodes/{name}`` and ``.../status``              ``application/merge-patch+json``
                                                                  or ``strategic-merge-patch+json``
                                                                  (else 415); 409 on a stale
                                                                  ``metadata.resourceVersion``
GET      ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``        a PodList; ``fieldSelector``
                                                                  ``spec.nodeName=...`` (=, ==, !=)
POST     ``/api/v1/namespaces/{ns}/pods/{name}/eviction``         201, 429 (a budget), 404, 500
POST     ``/api/v1/namespaces/{ns}/events``                       201 (core/v1 Event), 422
POST     ``/apis/events.k8s.io/v1/namespaces/{ns}/events``        201 (events.k8s.io/v1), 422
GET      ``/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets``  with their computed status
=======  =======================================================  ===============================

Every answer that is not an object is a ``Status`` (kind, status, message, reason, details,
code); a request without ``Authorization: Bearer <token>`` is a 401. The agent's client finds it
as in a pod: ``token`` and ``ca.crt`` in a service-account folder (``service_account_dir``).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from .kube_cluster import Cluster
from .kube_rules import ApiFailure
from .served import Served
from .tls import generate

TOKEN = "standin-service-account-token"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)(/status)?$")
_PODS = re.compile(r"^/api/v1(?:/namespaces/([^/]+))?/pods$")
_EVICT = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
_EVENTS = re.compile(r"^/(?:api/v1|apis/(events\.k8s\.io)/v1)/namespaces/([^/]+)/events$")
_PDBS = re.compile(r"^/apis/policy/v1/namespaces/([^/]+)/poddisruptionbudgets$")


def field_selector(text: str) -> list[tuple[str, str, bool]]:
    out = []
    for part in filter(None, text.split(",")):
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", part)
        if m is None:
            raise ApiFailure(400, "BadRequest", f"invalid selector: {part!r}")
        out.append((m.group(1), m.group(3), m.group(2) != "!="))
    return out


class KubernetesApi(Served):
    def __init__(self, directory: str | Path, *, cluster: Cluster | None = None) -> None:
        """``directory``: where the TLS files and the service-account folder are written."""
        self.directory = Path(directory)
        self.cluster = cluster or Cluster()
        self.tls = generate(self.directory / "tls", ("localhost", "127.0.0.1"))
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def service_account_dir(self) -> Path:
        """A folder as Kubernetes mounts it in a pod: token, ca.crt, namespace."""
        d = self.directory / "serviceaccount"
        d.mkdir(parents=True, exist_ok=True)
        (d / "token").write_text(TOKEN)
        (d / "ca.crt").write_bytes(self.tls.ca_cert.read_bytes())
        (d / "namespace").write_text("kube-system")
        return d

    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        ctx = self.tls.server_context()
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self


class _Handler(BaseHTTPRequestHandler):
    standin: KubernetesApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ApiFailure(401, "Unauthorized", "Unauthorized")
            body = json.loads(raw) if raw else None
            code, answer = self._route(method, path, query, body)
        except json.JSONDecodeError as exc:
            code, answer = 400, ApiFailure(400, "BadRequest", f"invalid JSON: {exc}").status()
        except ApiFailure as exc:
            code, answer = exc.code, exc.status()
        self.standin.requests.append((method, path, code))
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str, path: str, query: dict[str, Any], body: Any) -> tuple[int, Any]:
        c = self.standin.cluster
        if m := _NODE.match(path):
            if method == "GET" and not m.group(2):
                return 200, c.get_node(m.group(1))
            if method == "PATCH":
                kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if kind not in (MERGE, STRATEGIC):
                    raise ApiFailure(
                        415,
                        "UnsupportedMediaType",
                        f"the body of the request was in an unknown format - accepted media "
                        f"types include: {MERGE}, {STRATEGIC}",
                    )
                return 200, c.patch_node(
                    m.group(1), body, strategic=kind == STRATEGIC, status=bool(m.group(2))
                )
        elif (m := _PODS.match(path)) and method == "GET":
            sel = field_selector((query.get("fieldSelector") or [""])[0])
            items = c.list_pods(m.group(1), sel)
            return 200, {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": c.resource_version()},
                "items": items,
            }
        elif (m := _EVICT.match(path)) and method == "POST":
            c.evict(m.group(1), m.group(2), body)
            return 201, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
            }
        elif (m := _EVENTS.match(path)) and method == "POST":
            return 201, c.create_event(m.group(2), body, group=m.group(1) or "")
        elif (m := _PDBS.match(path)) and method == "GET":
            with c.lock:
                items = [
                    {**b, "status": c.budget_status(b)}
                    for (ns, _), b in sorted(c.pdbs.items())
                    if ns == m.group(1)
                ]
            return 200, {
                "kind": "PodDisruptionBudgetList",
                "apiVersion": "policy/v1",
                "items": items,
            }
        raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
