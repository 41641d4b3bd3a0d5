"""Configuration: every bad file in tests/data/config gives its one-line message (STYLE 1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor import __version__
from monitor.cli.commands import main
from monitor.config import load, parse, parse_duration, parse_ratio, parse_size
from monitor.core.errors import ConfigError

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data" / "config"
INVALID = sorted(DATA.glob("invalid-*.yaml"))


def expected_message(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()  # the file may not be UTF-8 after
    assert first.startswith("# expect: "), f"{path.name} must say what it expects"
    return first.removeprefix("# expect: ")


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_file_names_file_key_and_problem(path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert expected_message(path) in message
    assert "\n" not in message


def test_full_example_of_the_spec_loads() -> None:
    cfg = load(DATA / "valid-full.yaml", env={"SLACK_WEBHOOK_URL": "https://hooks.slack/T/B/x",
                                              "HOOK_SECRET": "s3cret"})
    blog, shop = cfg.resolved_targets()
    assert blog.settings.interval == 600
    assert shop.settings.interval == 900
    assert shop.site
    assert shop.url == "https://shop.example.com"
    assert blog.settings.max_bytes == 50 * 2**20
    assert blog.settings.user_agent == f"sitemap-monitor/{__version__}"
    assert cfg.alerts.channels[2].secret == "s3cret"  # noqa: S105 - a test fixture
    assert cfg.alerts.rules[0].ratio == 0.05


def test_secret_from_file(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("from-a-file\n")
    (tmp_path / "c.yaml").write_text(
        "alerts:\n  channels: [{name: h, type: webhook, url: https://h.example/x, "
        "secret_file: secret}]\n"
    )
    assert load(tmp_path / "c.yaml", env={}).alerts.channels[0].secret == "from-a-file"  # noqa: S105


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("1.5h", 5400),
                                               ("250ms", 0.25), (12, 12), ("2d", 172800)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_sizes_and_ratios() -> None:
    assert parse_size("50MiB") == 50 * 2**20
    assert parse_size("10MB") == 10**7
    assert parse_ratio("10%") == 0.1
    assert parse_ratio(0.25) == 0.25


def test_config_check_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", str(DATA / "invalid-unknown-key.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("targets[0].intervall: unknown key")
    assert "\n" not in err
    assert main(["config", "check", "--config", "examples/monitor.yaml"]) == 0
    assert "ok: 2 targets" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 2
    assert main(["check", "not-configured"]) == 2
    assert "is not configured" in capsys.readouterr().err
    assert main(["check", "https://example.test/s.xml", "--fail-on", "exploded"]) == 2


def test_url_checks_merge_key_by_key_over_the_defaults() -> None:
    cfg = parse({"defaults": {"url_checks": {"enabled": True, "recheck": "1d"}},
                 "targets": [{"name": "a", "url": "https://example.com/s.xml",
                              "url_checks": {"rate": 5}},
                             {"name": "b", "url": "https://example.com/t.xml"}]})
    a, b = cfg.resolved_targets()
    assert (a.settings.url_checks.enabled, a.settings.url_checks.rate,
            a.settings.url_checks.recheck) == (True, 5.0, 86400.0)
    assert (b.settings.url_checks.rate, b.settings.url_checks.body_limit) == (1.0, 2 * 2**20)
    assert not parse({}).defaults.url_checks.enabled  # opt-in


def test_retention_merges_key_by_key_and_keeps_at_least_one_snapshot() -> None:
    cfg = parse({"defaults": {"retention": {"snapshots": "30d"}},
                 "targets": [{"name": "a", "url": "https://example.com/s.xml",
                              "retention": {"keep_last": 5}},
                             {"name": "b", "url": "https://example.com/t.xml"}]})
    a, b = cfg.resolved_targets()
    assert (a.settings.retention.snapshots, a.settings.retention.keep_last) == (30 * 86400, 5)
    assert (b.settings.retention.snapshots, b.settings.retention.keep_last) == (30 * 86400, 100)
    assert parse({}).defaults.retention.snapshots == 90 * 86400  # the defaults
    with pytest.raises(ConfigError, match="keep_last"):
        parse({"defaults": {"retention": {"keep_last": 0}}})
    with pytest.raises(ConfigError, match="retention"):
        parse({"defaults": {"retention": {"days": 3}}})


def test_the_config_knows_the_url_states_and_reasons_of_the_model() -> None:
    from typing import get_args

    from monitor.config import RemovalReason, UrlState
    from monitor.core.model import REMOVAL_REASONS, URL_STATES

    assert set(get_args(UrlState)) == set(URL_STATES)
    assert set(get_args(RemovalReason)) == set(REMOVAL_REASONS)


def test_file_paths_are_kept_as_paths_not_read(tmp_path: Path) -> None:
    """smtp_ca_file, tls_cert_file and tls_key_file name files the daemon opens: not ``X_file``
    secrets (smtp_ca_file was read into an unknown key ``smtp_ca`` before)."""
    (tmp_path / "ca.pem").write_text("not read")
    (tmp_path / "cert.pem").write_text("not read")
    (tmp_path / "key.pem").write_text("not read")
    path = tmp_path / "c.yaml"
    path.write_text(
        "web: {tls_cert_file: cert.pem, tls_key_file: key.pem}\n"
        "alerts:\n  channels:\n    - {name: mail, type: email, smtp_host: smtp.example,"
        " from: a@example.com, to: [b@example.com], smtp_ca_file: ca.pem}\n")
    cfg = load(path, env={})
    assert cfg.web.tls_cert_file == str(tmp_path / "cert.pem")
    assert cfg.web.tls_key_file == str(tmp_path / "key.pem")
    assert cfg.alerts.channels[0].smtp_ca_file == str(tmp_path / "ca.pem")


def test_basic_auth_users_from_a_file(tmp_path: Path) -> None:
    from monitor.serve.auth import hash_password

    hashed = hash_password("pw", rounds=4)
    (tmp_path / "users.yaml").write_text(f"seo: '{hashed}'\nops: '{hashed}'\n")
    path = tmp_path / "c.yaml"
    path.write_text("web: {basic_auth_users_file: users.yaml, protect_metrics: true}\n")
    cfg = load(path, env={})
    assert cfg.web.basic_auth_users == {"seo": hashed, "ops": hashed}
    assert cfg.web.protect_metrics
    (tmp_path / "users.yaml").write_text("seo: hunter2\n")
    with pytest.raises(ConfigError, match="user 'seo': not a bcrypt hash"):
        load(path, env={})


def test_indexnow_key_from_a_secret_file_and_merged_per_target(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("abcdef0123-4567\n")
    (tmp_path / "c.yaml").write_text(
        "defaults:\n  indexnow: {key_file: key, endpoint: 'http://127.0.0.1:9/indexnow'}\n"
        "targets:\n"
        "  - {name: a, url: https://a.example/s.xml, indexnow: {enabled: true}}\n"
        "  - {name: b, url: https://b.example/s.xml}\n")
    a, b = load(tmp_path / "c.yaml", env={}).resolved_targets()
    assert a.settings.indexnow.enabled
    assert a.settings.indexnow.key == "abcdef0123-4567"
    assert a.settings.indexnow.endpoint == "http://127.0.0.1:9/indexnow"
    assert a.settings.indexnow.submit == ("added", "changed", "removed")
    assert not b.settings.indexnow.enabled
    assert "abcdef0123" not in repr(a.settings)


# The hostile files a security review tried: each refused by `config check` and by `run`
# alike, in one line, before anything starts.
HOSTILE = ["invalid-interval-zero", "invalid-interval-ms", "invalid-interval-inf",
           "invalid-lease-inf", "invalid-rate-inf", "invalid-alias-bomb", "invalid-not-utf8"]


@pytest.mark.parametrize("name", HOSTILE)
def test_config_check_refuses_each_hostile_file(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / f"{name}.yaml"
    assert main(["config", "check", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected_message(path) in err
    assert "\n" not in err


# Those that made `run` crash, spin or never check (a daemon start costs seconds each).
@pytest.mark.parametrize("name", ["invalid-interval-inf", "invalid-lease-inf",
                                  "invalid-not-utf8"])
def test_run_refuses_what_config_check_refuses(name: str, tmp_path: Path) -> None:
    path = DATA / f"{name}.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SITEMAP_MONITOR_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", "from monitor.cli.commands import script; script()", "run",
         "--config", str(path), "--database-url", f"sqlite:///{tmp_path / 'm.db'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert expected_message(path) in done.stdout + done.stderr
    assert not (tmp_path / "m.db").exists()  # refused before anything was made


def test_an_alias_bomb_is_refused_at_once() -> None:
    started = time.process_time()
    with pytest.raises(ConfigError, match="aliases"):
        load(DATA / "invalid-alias-bomb.yaml", env={})
    assert time.process_time() - started < 0.5


def test_a_short_interval_on_a_remote_site_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "targets:\n"
        "  - {name: shop, url: https://shop.example.com/sitemap.xml, interval: 30s}\n"
        "  - {name: local, url: http://127.0.0.1:8000/sitemap.xml, interval: 1s}\n"
        "  - {name: blog, url: https://blog.example.com/sitemap.xml, interval: 1m}\n")
    assert main(["config", "check", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "ok: 3 targets" in out
    assert err.splitlines() == [
        f"sitemap-monitor: {path}: warning: targets: shop: an interval of 30s checks "
        "shop.example.com more than once a minute"]


@pytest.mark.parametrize(("text", "message"), [
    (float("inf"), "not a finite duration"), (float("nan"), "not a finite duration"),
    ("9" * 400 + "d", "too long"), ("3651d", "too long")])
def test_durations_are_finite_and_bounded(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


def test_no_message_shows_a_password_from_a_target_url(
    capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("invalid-url-credentials", "invalid-url-credentials-redacted"):
        assert main(["config", "check", "--config", str(DATA / f"{name}.yaml")]) == 2
        assert "hunter2" not in capsys.readouterr().err
    assert main(["check", "https://robot:hunter2@shop.example.com/s.xml"]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "auth: {username, password_file}" in err


def test_auth_is_read_from_a_file_and_never_shown(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("hunter2\n")
    (tmp_path / "c.yaml").write_text(
        "targets:\n"
        "  - name: shop\n"
        "    url: https://shop.example.com/sitemap.xml\n"
        "    auth: {username: robot, password_file: pw}\n")
    cfg = load(tmp_path / "c.yaml", env={})
    (shop,) = cfg.resolved_targets()
    auth = shop.settings.auth
    assert auth is not None
    assert (auth.origin, auth.username, auth.password) == (
        "https://shop.example.com:443", "robot", "hunter2")
    for shown in (repr(cfg), str(cfg), repr(shop), repr(auth), str(shop.settings)):
        assert "hunter2" not in shown


def test_globs_are_not_aliases(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "alerts:\n"
        "  channels: [{name: ops, type: webhook, url: https://h.example/x}]\n"
        "  rules:\n"
        "    - {name: all, when: added, targets: ['*'], channels: [ops]}\n"
        "    - {name: dates, when: issues, rule: [lastmod-*], targets: [\"shop-*\"],"
        " channels: [ops]}\n")
    cfg = load(tmp_path / "c.yaml", env={})
    assert cfg.alerts.rules[1].rule == ["lastmod-*"]
