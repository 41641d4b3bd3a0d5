"""Configuration: frozen models with their defaults, and ``load()``.

Unknown keys are errors, ``${ENV}`` is expanded in strings, and a key ``X_file`` reads the
value of ``X`` from a file (for Kubernetes secrets). Every error is one line naming the file
and the key. Callers import from here; the modules, each over the ones below it:

- ``document``: the whole file (``Config``), ``parse`` and ``load`` with the YAML's limits
- ``targets``: a target as written, the defaults it inherits, the resolved ``Target``
- ``alerts``: the ``alerts:`` section; ``daemon``: ``scheduler:``, ``http:``, ``web:``
- ``values``: durations, sizes and ratios as written, and the frozen base model
"""

from monitor.config.alerts import (
    Alerts,
    Channel,
    ChannelType,
    Delivery,
    RemovalReason,
    Rule,
    RuleWhen,
    UrlState,
)
from monitor.config.daemon import Http, Scheduler, Web, split_listen
from monitor.config.document import DEFAULT_DATABASE_URL, PATH_KEYS, Config, load, parse
from monitor.config.targets import (
    DEFAULT_USER_AGENT,
    INDEXNOW_ENDPOINT,
    POLITE_INTERVAL,
    Auth,
    BasicAuth,
    Defaults,
    IndexNow,
    IndexNowKind,
    Limits,
    Retention,
    Target,
    TargetSpec,
    UrlChecks,
    adhoc_target,
    origin_of,
    resolve,
    warnings,
)
from monitor.config.values import (
    MAX_DURATION,
    Duration,
    Interval,
    Ratio,
    Size,
    Timeout,
    format_duration,
    parse_duration,
    parse_ratio,
    parse_size,
)

__all__ = [
    "DEFAULT_DATABASE_URL", "DEFAULT_USER_AGENT", "INDEXNOW_ENDPOINT", "MAX_DURATION", "PATH_KEYS",
    "POLITE_INTERVAL", "Alerts", "Auth", "BasicAuth", "Channel", "ChannelType", "Config",
    "Defaults", "Delivery", "Duration", "Http", "IndexNow", "IndexNowKind", "Interval", "Limits",
    "Ratio", "RemovalReason", "Retention", "Rule", "RuleWhen", "Scheduler", "Size", "Target",
    "TargetSpec", "Timeout", "UrlChecks", "UrlState", "Web", "adhoc_target", "format_duration",
    "load", "origin_of", "parse", "parse_duration", "parse_ratio", "parse_size", "resolve",
    "split_listen", "warnings",
]
