"""Sinks: where records go after the outbox. See ``base`` for the interface."""
