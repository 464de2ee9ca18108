"""Prometheus metrics, off by default: an HTTP endpoint on a loopback port and/or a textfile for
node_exporter's textfile collector. ``prometheus-client`` (the ``metrics`` extra) is imported only
when ``[metrics]`` is configured."""
