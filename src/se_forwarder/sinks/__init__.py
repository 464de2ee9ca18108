"""The sinks: ``base`` (the interface and its errors), ``registry`` (which sinks exist, built
lazily), and one self-contained package per sink with its own configuration model."""
