"""Dependencies point one way. Every import of our code counts: at module level, under
``if TYPE_CHECKING`` (a type names what it needs as much as a call does) and inside a function
(lazy: it runs later, but it runs). The graph they make has no cycle, no arrow goes up a layer
(``LAYERS``, declared here, bottom first), and every lazy import is one of ``LAZY``, each with
why it waits."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import cache

from test_layout import rel, sources

MODULE, TYPE, LAZY_KIND = "module", "type", "lazy"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module imported, resolved (ours: the module or package it names)
    kind: str  # MODULE, TYPE (under TYPE_CHECKING) or LAZY_KIND (inside a function)
    line: int


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str, is_pkg: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The modules an import statement names (``from a import b``: ``a.b`` when it is a module
    of ours, else ``a``)."""
    mods = sources()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        out.append(sub if sub in mods else module)
    return out


@cache
def imports_of(name: str) -> tuple[Import, ...]:
    """Every import statement of module ``name``, ours and third-party, with how it runs."""
    path, tree = sources()[name]
    is_pkg = path.name == "__init__.py"
    found: list[Import] = []

    def walk(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(
                    Import(name, t, kind, child.lineno)
                    for t in _resolve(name, is_pkg, child)
                    if t != name
                )
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, LAZY_KIND)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    walk(ast.Module(body=[stmt], type_ignores=[]), TYPE)
                for stmt in child.orelse:
                    walk(ast.Module(body=[stmt], type_ignores=[]), kind)
            else:
                walk(child, kind)

    walk(tree, MODULE)
    return tuple(found)


def graph() -> dict[str, set[str]]:
    """Our modules -> the modules of ours they import, every kind of import counted."""
    mods = sources()
    return {n: {i.target for i in imports_of(n) if i.target in mods} for n in mods}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


# -- layers -----------------------------------------------------------------------------------

# Bottom first: a module may import its own layer and the layers below, never one above. A module
# belongs to the layer of the longest prefix naming it (``se_forwarder.x`` names ``x`` and
# everything under it).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the vocabulary every layer speaks: errors (with the Verdict), time, the contract and the
    # domain types, logs and masking, the one backoff and Retry-After parsing, the host
    (
        "foundation",
        (
            "se_forwarder",  # the package itself (__init__)
            "se_forwarder.errors",
            "se_forwarder.clock",
            "se_forwarder.timefmt",
            "se_forwarder.contract",
            "se_forwarder.model",
            "se_forwarder.redact",
            "se_forwarder.logs",
            "se_forwarder.lean",
            "se_forwarder.config_types",
            "se_forwarder.secret_source",
            "se_forwarder.backoff",
            "se_forwarder.tracefile",
            "se_forwarder.oshost",
        ),
    ),
    # who the agent and the collector are to Azure: [identity], the credential, the bounded
    # transport of its tokens
    ("identity", ("se_forwarder.identity",)),
    # the pipeline's stages up to the outbox, in order, and what acts beside them; each with its
    # own configuration section (imds/config.py, outbox/config.py, policy/config.py). The outbox
    # sits below recording (the tracker-to-outbox modules): its recovery is handed the rebuild.
    ("source", ("se_forwarder.imds",)),
    ("tracker", ("se_forwarder.tracker",)),
    ("outbox", ("se_forwarder.outbox",)),
    (
        "stages",
        (
            "se_forwarder.recording",
            "se_forwarder.notices",
            "se_forwarder.policy",
            "se_forwarder.hooks",
            "se_forwarder.approvals",
        ),
    ),
    # the sink contract, the sink kinds and one package per sink
    ("sinks", ("se_forwarder.sinks",)),
    ("delivery", ("se_forwarder.delivery",)),
    # the running agent's parts over the stages, sinks and delivery
    (
        "agent parts",
        (
            "se_forwarder.actions",
            "se_forwarder.loop",
            "se_forwarder.health",
            "se_forwarder.metrics",
            "se_forwarder.kube",  # [kubernetes]: the node's steps beside the policy's
        ),
    ),
    # the whole configuration: each section's model from its package, [sinks] from the kinds
    ("configuration", ("se_forwarder.config",)),
    # what a command runs: the agent (composition root), the collector, the report
    ("products", ("se_forwarder.agent", "se_forwarder.collector", "se_forwarder.report")),
    ("commands", ("se_forwarder.commands", "se_forwarder.cli")),
]


def layer_of(module: str) -> int | None:
    best, found = -1, None
    for n, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), n
    return found


def _ours(name: str) -> bool:
    return name == "se_forwarder" or name.startswith("se_forwarder.")


def test_no_import_cycle_counting_every_import():
    """In the agent's package (the test bed, a product of its own, is held by its own rules)."""
    g = graph()
    assert cycles({n: {m for m in g[n] if _ours(m)} for n in g if _ours(n)}) == []


def test_every_module_of_the_agent_package_has_a_layer():
    assert [n for n in sources() if _ours(n) and layer_of(n) is None] == []


def test_no_import_points_up_a_layer():
    up = []
    for name in sources():
        if not _ours(name):
            continue
        for imp in imports_of(name):
            if (
                _ours(imp.target)
                and imp.target in sources()
                and layer_of(imp.target) > layer_of(name)
            ):
                up.append(
                    f"{name} ({LAYERS[layer_of(name)][0]}) -> {imp.target} "
                    f"({LAYERS[layer_of(imp.target)][0]}, {imp.kind} import, line {imp.line})"
                )
    assert up == []


# -- lazy imports -----------------------------------------------------------------------------

# Every import inside a function of the agent package, by importer: what it imports and why it
# waits. Anything not listed is imported at module level (or under TYPE_CHECKING).
LAZY: dict[str, tuple[set[str], str]] = {
    # the CLI
    "se_forwarder.cli": (
        {"se_forwarder.lean", "importlib.metadata"},
        "run only: before pydantic, for its memory; the installed distributions' commands only "
        "for a command that is not the agent's own",
    ),
    "se_forwarder.lean": ({"hashlib", "hmac"}, "Python's own digests, imported in order"),
    "se_forwarder.outbox.recovery": (
        {"se_forwarder.outbox.pages"},
        "the raw page reader, only for a damaged outbox table",
    ),
    "se_forwarder.config": (
        {"se_forwarder.policy.config", "se_forwarder.kube.config"},
        "a section's model only when the file has the section (config_types.section_of): an "
        "agent without [policy] or [kubernetes] never builds them (its memory)",
    ),
    "se_forwarder.commands.run": (
        {"se_forwarder.agent", "se_forwarder.sinks.registry", "se_forwarder.sinks.base"},
        "after the configuration is valid: a config error costs no agent import",
    ),
    "se_forwarder.commands.collect": (
        {"se_forwarder.collector.config", "se_forwarder.collector.service"},
        "the collector's package, only when `collect` runs (never on a VM)",
    ),
    "se_forwarder.commands.status": (
        {"se_forwarder.collector.status"},
        "the collector's status rules, only for a collector's status.json",
    ),
    "se_forwarder.commands.report": (
        {
            "se_forwarder.report.workbooks.argrows",
            "se_forwarder.report.build",
            "se_forwarder.report.sources",
            "se_forwarder.report.kql.load",
        },
        "duckdb, matplotlib and Jinja2, only when `report` runs",
    ),
    # the agent's optional features: imported only when configured
    "se_forwarder.agent": (
        {"se_forwarder.metrics.exporter", "se_forwarder.kube"},
        "prometheus-client, only when [metrics] is configured; lightkube, only when "
        "[kubernetes] is",
    ),
    "se_forwarder.kube": (
        {"se_forwarder.approvals", "se_forwarder.kube.api", "se_forwarder.kube.controller"},
        "lightkube and the approver, only when [kubernetes] is configured",
    ),
    "se_forwarder.actions": (
        {"se_forwarder.actions.controller"},
        "the hook runner, the approver and subprocess, only when the policy acts",
    ),
    "se_forwarder.actions.service_gate": (
        {
            "azure.storage.blob",
            "se_forwarder.approvals.coordinator",
            "se_forwarder.identity.credential",
        },
        "azure-storage-blob and the credential, only when [policy.service] is configured",
    ),
    "se_forwarder.commands.check_config": (
        {"se_forwarder.sinks.webhook.words"},
        "the webhook's filters in words, only when a webhook is configured",
    ),
    # each sink's module and its SDK, only when that sink is configured
    **{
        f"se_forwarder.sinks.{name}": (
            {f"se_forwarder.sinks.{name}.sink"},
            "the sink's module and its SDK, only when the sink is configured",
        )
        for name in ("stdout", "file", "log_analytics", "event_hubs", "webhook")
    },
    "se_forwarder.sinks.event_hubs.peer_bound": (
        {"certifi"},
        "the CA bundle, only when no CA file is configured",
    ),
    "se_forwarder.sinks.event_hubs.sink": ({"json"}, "only for a record an older agent spooled"),
    "se_forwarder.identity.credential": (
        {"se_forwarder.identity.bounded_transport", "azure.identity"},
        "azure-identity, azure-core and requests, only when a credential is built",
    ),
    # the collector: each channel and its SDK, only when that channel runs
    "se_forwarder.collector.service": (
        {
            "se_forwarder.collector.hub",
            "se_forwarder.collector.graph",
            "se_forwarder.collector.approver",
            "se_forwarder.metrics.exporter",
        },
        "azure-eventhub and the checkpoint store, or Resource Graph, or prometheus-client, or "
        "azure-mgmt-core and azure-monitor-query (approvals, preview): only what runs",
    ),
    # the report: each heavy library only in the step that needs it
    "se_forwarder.report.render.charts": (
        {"matplotlib", "matplotlib.dates"},
        "only to draw a chart",
    ),
    "se_forwarder.report.kql.engine": ({"duckdb", "duckdb_kql"}, "only to run a query"),
    "se_forwarder.report.kql.load": ({"duckdb"}, "only to load rows"),
    "se_forwarder.report.kql.narrow": ({"duckdb_kql"}, "only to read its tostring's shape"),
    "se_forwarder.report.render.page": ({"jinja2"}, "only to render the page"),
    "se_forwarder.report.workbooks.workbook": ({"json"}, "only to read a workbook"),
    "se_forwarder.report.sources": (
        {"se_forwarder_testbed.fleet"},
        "`report --fleet N` only: the test bed generates the fleet",
    ),
    # the host
    "se_forwarder.oshost": ({"ctypes"}, "Windows only"),
    "se_forwarder.oshost.winservice": (
        {"servicemanager", "win32event", "win32service", "win32serviceutil"},
        "pywin32, Windows only",
    ),
    "se_forwarder.oshost.process": ({"subprocess"}, "only when a hook runs"),
    "se_forwarder.recording.recorder": (
        {"hashlib"},
        "only when a document changed without a new incarnation",
    ),
}


def test_every_lazy_import_is_listed_with_why():
    unlisted = sorted(
        f"{rel(sources()[i.importer][0])}:{i.line}: {i.target}"
        for name in sources()
        if _ours(name)
        for i in imports_of(name)
        if i.kind == LAZY_KIND and i.target not in LAZY.get(name, (set(), ""))[0]
    )
    assert unlisted == []


def test_the_lazy_list_names_only_lazy_imports_that_exist():
    lazy = {(i.importer, i.target) for n in sources() for i in imports_of(n) if i.kind == LAZY_KIND}
    stale = sorted(f"{k} -> {t}" for k, (ts, _) in LAZY.items() for t in ts if (k, t) not in lazy)
    assert stale == []


# -- the checks are not vacuous ---------------------------------------------------------------


def test_every_kind_of_import_is_seen():
    kinds = {(i.target, i.kind) for i in imports_of("se_forwarder.sinks.file")}
    assert ("se_forwarder.sinks.file.sink", LAZY_KIND) in kinds
    assert ("se_forwarder.sinks.base", TYPE) in kinds
    assert ("se_forwarder.sinks.kinds", MODULE) in kinds


def test_the_cycle_finder_finds_a_planted_cycle():
    g = graph()
    g["se_forwarder.errors"] = g["se_forwarder.errors"] | {"se_forwarder.sinks.answers"}
    assert ["se_forwarder.errors", "se_forwarder.sinks.answers"] in cycles(g)


# -- the run path -----------------------------------------------------------------------------

RUN_PATH = textwrap.dedent("""
    import json, sys
    from se_forwarder import cli
    from se_forwarder.commands import run
    from se_forwarder.agent import Agent
    from se_forwarder.config import load
    from helpers import build_sinks
    config = load(sys.argv[1], env={})
    sinks = build_sinks(config)
    assert [s.name for s in sinks] == ["file"]
    print(json.dumps(sorted(sys.modules)))
""")


def test_what_run_loads_with_the_file_sink_holds_no_collector_report_test_bed_or_sdk(tmp_path):
    """The modules ``run`` imports (its command, the agent, the configuration, the sinks built
    from a file-sink configuration), in a fresh interpreter: not the collector (its config
    included), the report, the test bed or any SDK of a sink not configured. The end-to-end
    ``test_run_path.py`` holds the same of a running agent."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[agent]\nstate_dir = "{tmp_path}"\n[sinks.file]\npath = "{tmp_path}/r"\n')
    out = subprocess.run(
        [sys.executable, "-c", RUN_PATH, str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=str(sources()["se_forwarder"][0].parents[2] / "tests"),
    )
    modules = json.loads(out.stdout.splitlines()[-1])
    assert "se_forwarder.sinks.file.sink" in modules and "se_forwarder.agent" in modules
    banned = (
        "se_forwarder.collector",
        "se_forwarder.report",
        "se_forwarder.commands.collect",
        "se_forwarder.commands.report",
        "se_forwarder_testbed",
        # the sections the file does not have: neither their packages nor their models
        "se_forwarder.sinks.stdout",
        "se_forwarder.sinks.log_analytics",
        "se_forwarder.sinks.event_hubs",
        "se_forwarder.sinks.webhook",
        "se_forwarder.policy",
        "se_forwarder.kube",
        "se_forwarder.identity.credential",
        "azure",
        "httpx",
        "requests",
        "urllib3",
        "duckdb",
        "matplotlib",
        "jinja2",
        "prometheus_client",
    )
    assert [m for m in modules if m in banned or m.startswith(tuple(b + "." for b in banned))] == []


def test_the_configuration_names_no_sink_no_registry_and_no_collector():
    """The root configuration reads ``[sinks]`` through the kinds the sink packages registered
    (Vector's sinks register themselves): it imports no sink package, not the registry that
    builds them, and nothing of the collector, at any level."""
    targets = {i.target for i in imports_of("se_forwarder.config")}
    from se_forwarder.sinks import kinds

    sink_packages = {f"se_forwarder.sinks.{name}" for name in kinds.NAMES}
    assert not targets & (sink_packages | {"se_forwarder.sinks.registry"})
    assert [t for t in targets if t.startswith("se_forwarder.collector")] == []
    assert "se_forwarder.sinks.kinds" in targets
