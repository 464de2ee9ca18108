"""Build the configured sinks. The Azure SDKs are imported here only for a sink that needs them,
so an agent with the file sink alone never pays for them."""

from __future__ import annotations

from ..config import BatchConfig, Config
from .base import BatchLimits, Sink


def limits(cfg: BatchConfig, default: BatchLimits) -> BatchLimits:
    return BatchLimits(
        max_records=cfg.max_records or default.max_records,
        max_bytes=min(cfg.max_bytes or default.max_bytes, default.max_bytes),
        linger_seconds=default.linger_seconds if cfg.linger_seconds is None else cfg.linger_seconds,
        max_record_bytes=default.max_record_bytes,
    )


def build(config: Config) -> list[Sink]:
    sinks: list[Sink] = []
    s = config.sinks
    if s.stdout is not None:
        from .stdout import StdoutSink
        sink = StdoutSink(heartbeats=s.stdout.heartbeats)
        sink.limits = limits(s.stdout, sink.limits)
        sinks.append(sink)
    if s.file is not None:
        from .file import FileSink
        fsink = FileSink(s.file.path, heartbeat_path=s.file.heartbeat_path,
                         max_file_bytes=s.file.max_file_bytes, backups=s.file.backups)
        fsink.limits = limits(s.file, fsink.limits)
        sinks.append(fsink)
    if s.log_analytics is not None:
        from .log_analytics import LogAnalyticsSink
        sinks.append(LogAnalyticsSink.from_config(s.log_analytics, config.identity))
    if s.event_hubs is not None:
        from .event_hubs import EventHubsSink
        sinks.append(EventHubsSink.from_config(s.event_hubs, config.identity))
    return sinks
