"""`check`'s start-up: a database at head, or an empty SQLite one, is opened without importing
Alembic.

The schema test reads the migration files as text; these tests hold it to Alembic's answer on
the shipped migrations and on shapes it must leave to Alembic, and run the real console entry in
a fresh process, where ``sys.modules`` shows what a user's ``check`` imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from httpserver import Reply, TestServer

from monitor.cli.commands import main
from monitor.store import db

ROOT = Path(__file__).resolve().parents[1]
URLSET = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
          b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
          b"<url><loc>https://example.test/a</loc></url></urlset>\n")
# Runs `check` as the console script does, then reports which modules it need not import were
# (structlog, and the rich it brings, cost a check that logs nothing 150 M instructions).
CHECK = """
import json, sys
from monitor.cli.commands import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, **{name: name in sys.modules
                                   for name in ("alembic", "yaml", "structlog")}}))
"""
NONE_OF_THEM = {"alembic": False, "yaml": False, "structlog": False}


def check_in_fresh_process(url: str, database_url: str) -> dict[str, object]:
    """Run ``check URL`` (no config file) in a new interpreter: exit code, outcome, imports."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, "check", url, "--database-url", database_url, "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )
    assert done.stderr == "", done.stderr
    result, report = (json.loads(line) for line in done.stdout.splitlines())
    return {**report, "outcome": result["outcome"]}


def test_check_at_head_does_not_import_alembic(
    http_server: TestServer, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    http_server.route("/sitemap.xml", Reply(200, URLSET, {"Content-Type": "application/xml"}))
    url = http_server.url("/sitemap.xml")
    db_url = database_url.replace("postgresql+psycopg://", "postgresql://")
    if db_url.startswith("postgresql"):  # PostgreSQL is never migrated by `check`
        assert main(["check", url, "--database-url", db_url]) == 2
        assert "run 'sitemap-monitor db upgrade'" in capsys.readouterr().err
        assert main(["db", "upgrade", "--database-url", db_url]) == 0
        first = check_in_fresh_process(url, db_url)
        assert first == {"code": 0, "outcome": "ok", **NONE_OF_THEM}
    else:  # an empty SQLite database gets the newest schema whole (db.create_schema)
        first = check_in_fresh_process(url, db_url)
        assert first == {"code": 0, "outcome": "ok", **NONE_OF_THEM}
    engine = db.make_engine(db_url)
    try:
        assert db.current_revision(engine) == db.head_revision()
    finally:
        engine.dispose()
    again = check_in_fresh_process(url, db_url)
    assert again == {"code": 0, "outcome": "unchanged", **NONE_OF_THEM}


def test_shipped_head_is_alembics() -> None:
    assert db._shipped_head(db.migrations_dir() / "versions") == db.head_revision()


def migration(revision: str, down: str, extra: str = "") -> str:
    """A migration file as Alembic's template writes it (``down`` is Python source)."""
    return (f'"""{revision}\n\nRevision ID: {revision}\nRevises: \n"""\n\n'
            f'revision: str = "{revision}"\ndown_revision: str | None = {down}\n'
            f"branch_labels = None\ndepends_on = None\n{extra}\n\n"
            "def upgrade() -> None:\n    pass\n\n\ndef downgrade() -> None:\n    pass\n")


PLAIN = {"0001_a.py": migration("0001", "None"), "0002_b.py": migration("0002", "'0001'"),
         "0003_c.py": migration("0003", '"0002"')}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(PLAIN, "0003", id="a chain"),
        pytest.param({"0001_a.py": migration("0001", "None")}, "0001", id="one file"),
        pytest.param({**PLAIN, "__init__.py": "", "notes.txt": "revision = 'x'\n"}, "0003",
                     id="other files ignored"),
        pytest.param({**PLAIN, "0004_m.py": migration("0004", "('0002', '0003')")}, None,
                     id="a merge"),
        pytest.param({**PLAIN, "0004_d.py": migration("0004", "'0002'")}, None, id="two heads"),
        pytest.param({"0002_b.py": migration("0002", "'0001'")}, None, id="a missing parent"),
        pytest.param({**PLAIN, "0004_l.py": migration("0004", "'0003'").replace(
            "branch_labels = None", "branch_labels = ('x',)")}, None, id="a branch label"),
        pytest.param({**PLAIN, "0004_r.py": migration("0004", "'0003'").replace(
            'revision: str = "0004"', "revision = make_id()")}, None, id="a computed id"),
        pytest.param({**PLAIN, "0004_t.py": migration("0004", "'0003'", "revision = '0005'")},
                     None, id="an id set twice"),
        pytest.param({}, None, id="no files"),
    ],
)
def test_shipped_head_reads_only_plain_chains(
    tmp_path: Path, files: dict[str, str], expected: str | None
) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    for name, text in files.items():
        (versions / name).write_text(text, encoding="utf-8")
    assert db._shipped_head(versions) == expected
    if expected is not None:  # the same answer as Alembic's, which imports the files
        assert ScriptDirectory(str(tmp_path)).get_current_head() == expected


# The console script: main(), then os._exit() past the interpreter's teardown.
SCRIPT = "from monitor.cli.commands import script; script()"


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    # Buffered output, as a user's terminal-less run has it: what os._exit would lose unflushed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=False)


def test_the_console_script_is_script() -> None:
    from importlib.metadata import entry_points

    (entry,) = entry_points(group="console_scripts", name="sitemap-monitor")
    assert entry.value == "monitor.cli.script:script"


# What a digest worker does with the console script before its first document (forkserver and
# spawn alike): run the file again as __mp_main__. Then the modules it loaded, of these.
AS_MP_MAIN = """
import json, runpy, sys
runpy.run_path(sys.argv[1], run_name="__mp_main__")
print(json.dumps(sorted(m for m in ("monitor.cli.commands", "monitor.config", "pydantic", "asyncio")
                        if m in sys.modules)))
"""


def test_a_worker_loads_nothing_of_the_cli_from_the_console_script() -> None:
    script = Path(sys.executable).with_name("sitemap-monitor")
    assert script.is_file(), f"{script}: the console script is not installed beside python"
    done = subprocess.run([sys.executable, "-c", AS_MP_MAIN, str(script)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=True)
    assert json.loads(done.stdout) == []


def test_script_keeps_exit_codes_and_output(http_server: TestServer, tmp_path: Path) -> None:
    """Its quick exit still writes all of the output and exits with main()'s code."""
    many = b"".join(b"<url><loc>https://example.test/%d</loc></url>" % i for i in range(3000))
    http_server.route("/sitemap.xml", Reply(200, URLSET.replace(
        b"<url><loc>https://example.test/a</loc></url>", many), {"Content-Type": "text/xml"}))
    url, db_url = http_server.url("/sitemap.xml"), f"sqlite:///{tmp_path}/monitor.db"
    first = run_script("check", url, "--database-url", db_url, "--json", "--max-changes", "3000",
                       "--fail-on", "added")
    assert (first.returncode, first.stderr) == (3, "")
    assert first.stdout.endswith("}\n")  # the whole line (about 300 kB), not a cut-off buffer
    result = json.loads(first.stdout)
    assert (result["added"], len(result["changes"])) == (3000, 3000)
    again = run_script("check", url, "--database-url", db_url, "--json", "--fail-on", "added")
    assert (again.returncode, json.loads(again.stdout)["outcome"]) == (0, "unchanged")
    usage = run_script("check")
    assert usage.returncode == 2
    assert usage.stderr.startswith("sitemap-monitor: usage:")
    version = run_script("--version")  # argparse exits by SystemExit: the usual way out
    assert (version.returncode, version.stdout.split()[0]) == (0, "sitemap-monitor")


@pytest.mark.parametrize("urls", [1, 3000])
def test_a_reader_that_stops_early_gets_no_traceback(http_server: TestServer, tmp_path: Path,
                                                     urls: int) -> None:
    """`check --json | head`: the reader has closed the pipe before a byte is written. The
    check completes and is stored, exits with its own code and writes nothing to stderr: 3,000
    URLs make the output (about 300 kB) break inside print, one URL at the final flush."""
    many = b"".join(b"<url><loc>https://example.test/%d</loc></url>" % i for i in range(urls))
    http_server.route("/sitemap.xml", Reply(200, URLSET.replace(
        b"<url><loc>https://example.test/a</loc></url>", many), {"Content-Type": "text/xml"}))
    url, db_url = http_server.url("/sitemap.xml"), f"sqlite:///{tmp_path}/monitor.db"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "check", url, "--database-url", db_url, "--json",
         "--max-changes", "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read().decode()
        assert (process.wait(timeout=120), stderr) == (0, "")
    history = run_script("history", url, "--database-url", db_url, "--json")
    assert [(row["outcome"], row["added"]) for row in json.loads(history.stdout)["snapshots"]] == [
        ("ok", urls)]
