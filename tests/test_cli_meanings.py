"""What the command line means, as a user meets it (the console script and the daemon as
subprocesses, a real local site): global options before the command, one meaning per exit
code, a ``validate`` head that agrees with its exit code, a first check at start whatever the
jitter, and no lock file left beside the database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from httpserver import Reply, TestServer, closed_port

SCRIPT = Path(sys.executable).with_name("sitemap-monitor")
ROOT = Path(__file__).resolve().parent.parent
SITEMAP = (b'<?xml version="1.0" encoding="UTF-8"?>'
           b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
           b"<url><loc>https://a.example/1</loc></url></urlset>")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SITEMAP_MONITOR_DATABASE_URL": "", "SITEMAP_MONITOR_CONFIG": ""}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=60, check=False)


def test_global_options_go_before_or_after_the_command(http_server: TestServer,
                                                        tmp_path: Path) -> None:
    http_server.route("/s.xml", Reply(body=SITEMAP))
    config = tmp_path / "c.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path}/m.db\n"
                      f"targets:\n  - {{name: shop, url: '{http_server.url('/s.xml')}'}}\n",
                      encoding="utf-8")
    assert cli("--config", str(config), "check", "shop", cwd=tmp_path).returncode == 0
    done = cli("--config", str(config), "history", "shop", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "SNAPSHOT" in done.stdout
    other = tmp_path / "other.db"
    # after the command wins over before it
    done = cli("--database-url", f"sqlite:///{other}", "history", "shop", "--database-url",
               f"sqlite:///{tmp_path}/m.db", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not other.exists()


def test_a_service_that_is_not_there_is_exit_code_2(tmp_path: Path) -> None:
    """The database cannot be reached, the port is taken: the environment's, exit code 2
    for every command (1 is a check that failed, and only that)."""
    unreachable = f"postgresql://postgres@127.0.0.1:{closed_port()}/monitor"
    for args in (["history", "shop"], ["changes", "shop"], ["db", "upgrade"]):
        done = cli(*args, "--database-url", unreachable, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert "refused" in done.stderr.lower()
    config = tmp_path / "run.yaml"
    config.write_text(f"database_url: {unreachable}\nlisten: 127.0.0.1:0\ntargets: []\n",
                      encoding="utf-8")
    done = cli("run", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "unreachable" in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config.write_text(f"database_url: sqlite:///{tmp_path}/m.db\n"
                          f"listen: 127.0.0.1:{port}\ntargets: []\n", encoding="utf-8")
        done = cli("run", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2, done.stderr


def test_validate_heads_its_output_with_what_it_found(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>https://a.example/1</loc><lastmod>yesterday</lastmod></url>"
        "<url><loc>https://a.example/1</loc></url>"
        "<url><loc>/relative</loc></url>"
        "<url><loc>https://a.example/2</loc><priority>7</priority></url></urlset>",
        encoding="utf-8")
    done = cli("validate", str(bad), cwd=tmp_path)
    assert done.returncode == 3
    head = done.stdout.splitlines()[0]
    assert head.startswith(f"{bad}: not valid: 3 errors, 1 warning "), head
    assert " ok " not in head
    assert "listed more than once in this file" in done.stdout
    good = tmp_path / "good.xml"
    good.write_bytes(SITEMAP)
    done = cli("validate", str(good), cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith(f"{good}: valid "), done.stdout


def test_the_first_check_runs_at_start_and_no_lock_is_left(http_server: TestServer,
                                                            tmp_path: Path) -> None:
    """Half an hour of jitter delays the checks after the first, never the first."""
    http_server.route("/s.xml", Reply(body=SITEMAP))
    config = tmp_path / "c.yaml"
    config.write_text(
        "database_url: sqlite:///./sitemap-monitor.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1h, jitter: 50%}\n"
        f"targets:\n  - {{name: shop, url: '{http_server.url('/s.xml')}'}}\n", encoding="utf-8")
    env = {**os.environ, "SITEMAP_MONITOR_DATABASE_URL": "", "SITEMAP_MONITOR_CONFIG": ""}
    daemon = subprocess.Popen([str(SCRIPT), "run", "--config", str(config)], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    checked = threading.Event()

    def read() -> None:  # the log, line by line
        assert daemon.stderr is not None
        for line in daemon.stderr:
            if '"event": "check"' in line and '"target": "shop"' in line:
                checked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert checked.wait(30), "no check within 30 s of the start"
        assert (tmp_path / "sitemap-monitor.db.lock").exists()  # held while it runs
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        reader.join(10)
        if daemon.stderr is not None:
            daemon.stderr.close()
    assert daemon.returncode == 0
    assert not (tmp_path / "sitemap-monitor.db.lock").exists()
    ignored = subprocess.run(["git", "check-ignore", "-q", "sitemap-monitor.db.lock"],
                             cwd=ROOT, check=False)
    assert ignored.returncode == 0
