"""The whole configuration file (``Config``) and how it is read: ``load()`` and ``parse()``.

Unknown keys are errors, ``${ENV}`` is expanded in strings, and a key ``X_file`` reads the
value of ``X`` from a file (for Kubernetes secrets). Every error is one line naming the file
and the key. A file is read as UTF-8 YAML without aliases (a few nested ones expand to
billions of nodes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from monitor.config.alerts import Alerts
from monitor.config.daemon import Http, Scheduler, Web, split_listen
from monitor.config.targets import Defaults, Retention, Target, TargetSpec, resolve
from monitor.config.values import Frozen
from monitor.core.errors import ConfigError, redact_url

__all__ = ["DEFAULT_DATABASE_URL", "PATH_KEYS", "Config", "load", "parse"]

DEFAULT_DATABASE_URL = "sqlite:///./sitemap-monitor.db"
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Every alias either YAML loader accepts: both take only these characters in its name.
_MAYBE_ALIAS = re.compile(r"\*[0-9A-Za-z_-]")


class Config(Frozen):
    """The whole configuration file."""

    database_url: str = DEFAULT_DATABASE_URL
    listen: str = "0.0.0.0:8080"
    defaults: Defaults = Defaults()
    scheduler: Scheduler = Scheduler()
    http: Http = Http()
    web: Web = Web()
    targets: list[TargetSpec] = Field(default_factory=list)
    alerts: Alerts = Alerts()

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_listen(value)
        return value

    @model_validator(mode="after")
    def _unique(self) -> Config:
        seen: set[str] = set()
        for spec in self.targets:
            if spec.name in seen:
                raise ValueError(f"duplicate target name {spec.name!r}")
            seen.add(spec.name)
            indexnow = resolve(spec, self.defaults).settings.indexnow
            if indexnow.enabled and indexnow.key is None:
                raise ValueError(f"target {spec.name!r}: indexnow is enabled without a key "
                                 "(set indexnow.key or indexnow.key_file)")
        return self

    def resolved_targets(self) -> list[Target]:
        """Every configured target with its settings resolved."""
        return [resolve(spec, self.defaults) for spec in self.targets]

    def target(self, name: str) -> Target | None:
        """The configured target of that name, or None."""
        for spec in self.targets:
            if spec.name == name:
                return resolve(spec, self.defaults)
        return None

    def retention(self, name: str) -> Retention:
        """The retention of the target of that name; the defaults' for one the configuration
        no longer names (its history then goes down to their ``keep_last``, never whole)."""
        target = self.target(name)
        return (self.defaults if target is None else target.settings).retention


# Keys that name a file the daemon opens itself (a CA bundle, a certificate): kept as paths,
# relative to the configuration's folder, not read as ``X_file`` secrets.
PATH_KEYS = frozenset({"smtp_ca_file", "tls_cert_file", "tls_key_file"})


def _expand(value: Any, where: str, env: Mapping[str, str], base: Path) -> Any:
    """Expand ``${ENV}`` in strings and ``X_file`` keys (but ``PATH_KEYS``), recursively."""
    if isinstance(value, str):
        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return env[name]
        return _ENV.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]", env, base) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            key = str(key)
            path = f"{where}.{key}" if where else key
            if key in PATH_KEYS and isinstance(item, str):  # a path the daemon opens itself
                out[key] = str((base / _expand(item, path, env, base)).expanduser())
            elif key.endswith("_file") and isinstance(item, str):
                plain = key[: -len("_file")]
                if plain in value:
                    raise ConfigError(f"{path}: set either {plain} or {key}, not both")
                file = (base / _expand(item, path, env, base)).expanduser()
                try:
                    out[plain] = file.read_text(encoding="utf-8").strip()
                except OSError as exc:
                    raise ConfigError(f"{path}: cannot read {file}: {exc.strerror}") from None
            else:
                out[key] = _expand(item, path, env, base)
        return out
    return value


def _location(error: Mapping[str, Any]) -> str:
    parts = [str(p) for p in error["loc"] if not str(p).startswith("function-")]
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or "(top level)"


def parse(data: object, *, source: str = "<config>", env: Mapping[str, str] | None = None,
          base: Path | None = None) -> Config:
    """Build a Config from parsed YAML; errors name ``source`` and the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping")
    try:
        expanded = _expand(data, "", os.environ if env is None else env, base or Path("."))
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        return Config.model_validate(expanded)
    except ValidationError as exc:
        first: Mapping[str, Any] = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        raise ConfigError(redact_url(f"{source}: {_location(first)}: {message}")) from None


def load(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
         without: Collection[str] = ()) -> Config:
    """Read and validate a YAML configuration file; the top-level sections ``without`` names
    are left out unread (a listing needs no alert channel, nor its secret's variable)."""
    import yaml  # here: `check URL` without a file never needs it

    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read configuration: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    # libyaml's loader where PyYAML has it: 20,000 targets parsed in 0.4 s of CPU, not 2.3.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if _MAYBE_ALIAS.search(text):  # most files, globs like "*" or lastmod-* too, skip it
            _refuse_aliases(yaml, text, loader, file)
        data = yaml.load(text, Loader=loader)  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{file}:{where}: {problem}") from None
    if without and isinstance(data, dict):
        data = {key: value for key, value in data.items() if key not in without}
    return parse(data, source=str(file), env=env, base=file.parent)


def _refuse_aliases(yaml: Any, text: str, loader: Any, file: Path) -> None:
    """Raise ``ConfigError`` at the first alias: a few lines of nested aliases expand to
    billions of nodes (a "billion laughs"), and a configuration needs none."""
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            raise ConfigError(f"{file}: line {line}: YAML aliases (*{event.anchor}) are not "
                              "allowed: write the value out")
