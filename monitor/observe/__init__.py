"""What the monitor reports about itself: ``metrics`` (every Prometheus series, on an injected
registry) over ``targetseries`` (the per-target series kept as plain numbers), and ``log``
(structlog, configured once)."""
