"""IMDS simulator: Scheduled Events, the instance document and managed-identity tokens on loopback.

Use ``Simulator`` in-process (tests, demo, benchmarks) or ``se-forwarder simulate``.
"""

from se_forwarder.errors import ScenarioError

from .scenario import (
    EventSpec,
    Scenario,
    builtin_names,
    load_scenario,
    parse_scenario,
)
from .server import Simulator
from .tracescript import Observation, load_trace
from .wire import (
    INSTANCE_VERSIONS,
    LATEST,
    SCHEDULED_EVENTS_VERSIONS,
    ChangeRecord,
    RateLimiter,
    RequestRecord,
    render_event,
)

__all__ = [
    "INSTANCE_VERSIONS",
    "LATEST",
    "SCHEDULED_EVENTS_VERSIONS",
    "ChangeRecord",
    "EventSpec",
    "Observation",
    "RateLimiter",
    "RequestRecord",
    "Scenario",
    "ScenarioError",
    "Simulator",
    "builtin_names",
    "load_scenario",
    "load_trace",
    "parse_scenario",
    "render_event",
]
