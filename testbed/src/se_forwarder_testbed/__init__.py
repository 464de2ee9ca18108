"""The test bed: what no VM ever runs. The IMDS simulator, the local stand-ins for Azure services
(Logs Ingestion, Event Hubs, the managed-identity token authority, TLS), the demo, and the
harness that runs the real agent as a process (tests and benches).

Its own distribution, ``se-forwarder-testbed`` (``testbed/``): the agent's wheel holds none of it,
its commands reach ``se-forwarder`` through the ``se_forwarder.commands`` entry points, and the
agent's own commands never import it.
"""
