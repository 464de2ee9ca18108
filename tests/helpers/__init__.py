"""Shared test helpers: one package (``helpers.azure``: the Azure stand-ins world;
``helpers.traces``: trace building and replay; ``helpers.infra``: KQL and workbook checks; Bicep is
``tools/bicep_eval``). Running the agent is the test bed's: as a process
(``se_forwarder_testbed.agentproc``, shared with ``bench/``) or in this process on a FakeClock
(``helpers.agentrun``)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SHARED = (REPO / ".." / "shared").resolve()

# Every proxy variable pointing at a closed port: IMDS and the token endpoint must never use them.
DEAD_PROXY = dict.fromkeys(
    ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"),
    "http://127.0.0.1:9",
)


def build_sinks(config, clock=None):
    """The sinks ``run`` builds from ``config``: its ``[sinks]`` and one context (the agent's
    clock, the real one unless given)."""
    from se_forwarder.clock import SYSTEM
    from se_forwarder.sinks import registry
    from se_forwarder.sinks.base import SinkContext

    return registry.build(config.sinks, SinkContext.of(config, clock or SYSTEM))
