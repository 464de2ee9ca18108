"""The collector (``se-forwarder collect``): Azure's own record of every VM's maintenance, agent
or not, from the Event Grid system topic (delivered to an Event Hub) and from Azure Resource
Graph, written through the agent's outbox, delivery and sinks into ``ScheduledEventsPlatform_CL``
(docs/record-contract.md §6). Imported only by ``collect``: no VM's agent loads it.

Modules: ``record`` (the row), ``arm`` (resource ids, scale sets), ``eventgrid`` and ``graphrows``
(what the channels say → rows, pure, pydantic at the edge), ``writer`` (dedupe by Event Grid id,
order, commit), ``hub`` (the Event Hubs consumer and its checkpoints), ``graph`` (Resource Graph
queries, paging and throttling), ``service`` (the composition root), ``config``.
"""
