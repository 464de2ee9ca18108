"""The test bed: what no VM ever runs. The IMDS simulator, the local stand-ins for Azure services
(Logs Ingestion, Event Hubs, the managed-identity token authority, TLS), the demo, and the
harness that runs the real agent as a process (tests and benches).

Installed with the ``standins`` extra; the agent's own commands never import it.
"""
