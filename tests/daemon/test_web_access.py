"""Who may read the daemon's port: basic auth with bcrypt hashes and TLS, the daemon
as a subprocess asked over real HTTP(S); the probes stay open."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer, self_signed

from monitor.cli.commands import main
from monitor.serve.auth import FREE_FAILURES, hash_password

USER, PASSWORD = "seo", "correct horse"
BCRYPT_READS = 72  # bytes of a password


def web_config(tmp_path: Path, http_server: TestServer, web: str) -> Path:
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    return write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                        [("shop", http_server.url("/s.xml"))], extra=web)


@pytest.mark.parametrize("protect_metrics", [False, True])
def test_basic_auth_guards_the_api_and_leaves_the_probes_open(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon], protect_metrics: bool,
) -> None:
    hashed = hash_password(PASSWORD, rounds=4)
    config = web_config(tmp_path, http_server, (
        f"web:\n  basic_auth_users: {{{USER}: '{hashed}'}}\n"
        f"  protect_metrics: {str(protect_metrics).lower()}\n"))
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    base = daemon.base

    def get(path: str, auth: tuple[str, str] | None = None) -> httpx.Response:
        return httpx.get(base + path, auth=auth, timeout=10)

    for path in ("/api/v1/targets", "/api/v1/targets/shop/urls", "/api/v1/openapi.json"):
        denied = get(path)
        assert denied.status_code == 401, path
        assert denied.headers["www-authenticate"].startswith('Basic realm="sitemap-monitor"')
        assert denied.json() == {"error": {"status": 401, "message": "authentication required"}}
        assert get(path, (USER, "wrong")).status_code == 401
        assert get(path, ("nobody", PASSWORD)).status_code == 401
        assert get(path, (USER, PASSWORD)).status_code in (200, 404), path
    assert get("/api/v1/targets", (USER, PASSWORD)).json()["targets"][0]["name"] == "shop"
    assert get("/healthz").status_code == 200
    assert get("/readyz").status_code == 200
    assert get("/metrics").status_code == (401 if protect_metrics else 200)
    assert get("/metrics", (USER, PASSWORD)).status_code == 200
    # a malformed header is a 401, not an error
    bad = httpx.get(base + "/api/v1/targets", headers={"Authorization": "Basic !!!"}, timeout=10)
    assert bad.status_code == 401


def test_every_failed_login_is_the_same_401_and_counts(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    """A password bcrypt cannot take (over 72 bytes) is a failed login like any other, for a
    known user as for an unknown one: a 401, no error in the log, counted towards the wait."""
    longest = "L" * BCRYPT_READS
    config = web_config(tmp_path, http_server, (
        f"web:\n  basic_auth_users: {{{USER}: '{hash_password(PASSWORD, rounds=4)}', "
        f"long: '{hash_password(longest, rounds=4)}'}}\n"))
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()

    def get(auth: tuple[str, str], address: str = "127.0.0.1") -> int:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(transport=transport, timeout=10) as client:
            return client.get(daemon.base + "/api/v1/targets", auth=auth).status_code

    too_long = "x" * (BCRYPT_READS + 28)
    assert get(("nobody", too_long)) == 401
    assert get((USER, too_long)) == 401
    assert get(("long", longest)) == 200
    assert get(("long", longest + "L")) == 401  # what bcrypt reads of it is right: still no
    # Each of them is a failure of its address: past the free ones, it must wait.
    for i in range(FREE_FAILURES + 1):
        assert get(("nobody", f"{i}{too_long}"), "127.0.0.3") == 401
    assert get(("nobody", "short"), "127.0.0.3") == 429
    assert get((USER, PASSWORD)) == 200
    errors = [line for line in daemon.raw if "Traceback" in line or "Exception" in line
              or '"level": "error"' in line]
    assert errors == []


def test_tls_serves_https_only(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    made = self_signed(tmp_path)
    assert made is not None, "openssl is needed to make the test certificate"
    cert, key = made
    config = web_config(tmp_path, http_server,
                        f"web:\n  tls_cert_file: {cert}\n  tls_key_file: {key}\n")
    daemon = Daemon(config)
    daemons.append(daemon)
    line = daemon.started()
    assert line["api"].startswith("https://")
    https = f"https://{line['listen']}"
    trust = ssl.create_default_context(cafile=str(cert))
    assert httpx.get(https + "/healthz", verify=trust, timeout=10).status_code == 200
    answer = httpx.get(https + "/api/v1/targets", verify=trust, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["strict-transport-security"] == "max-age=63072000"  # HSTS under TLS
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{line['listen']}/healthz", timeout=5)


@pytest.mark.parametrize(("web", "message"), [
    ("web: {basic_auth_users: {seo: hunter2}}",
     "c.yaml: web.basic_auth_users: user 'seo': not a bcrypt hash (a plain-text password?); "
     "make one with `sitemap-monitor web hash-password`"),
    ("web: {tls_cert_file: /nonexistent.pem, tls_key_file: /nonexistent.key}",
     "c.yaml: web: tls_cert_file: no such file /nonexistent.pem"),
    ("web: {tls_cert_file: /etc/hostname}",
     "c.yaml: web: tls_cert_file and tls_key_file go together"),
])
def test_a_bad_web_section_is_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], web: str, message: str,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(web + "\n")
    assert main(["config", "check", "--config", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_hash_password_makes_a_hash_the_daemon_accepts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert main(["web", "hash-password"]) == 0
    hashed = capsys.readouterr().out.strip()
    import bcrypt

    assert bcrypt.checkpw(b"s3cret", hashed.encode())
    path = tmp_path / "c.yaml"
    path.write_text(f"web: {{basic_auth_users: {{seo: '{hashed}'}}}}\n")
    assert main(["config", "check", "--config", str(path)]) == 0
