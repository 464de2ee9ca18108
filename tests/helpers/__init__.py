"""Shared test helpers: one package (``helpers.azure``: the Azure stand-ins world;
``helpers.traces``: trace building and replay; ``helpers.infra``: Bicep, KQL and workbook checks).
Running the agent as a process is the test bed's (``se_forwarder_testbed.agentproc``), shared
with ``bench/``."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SHARED = (REPO / ".." / "shared").resolve()
