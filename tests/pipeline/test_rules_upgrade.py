"""An upgrade from the rules of 0.x (an empty ``<lastmod/>`` made a URL invalid, so did a bad
field) to a database the old release wrote, checked by this one, raises no
flood of ``added`` or ``invalid`` changes, and so no alert.

The old release is the real one: its code at ``OLD`` is taken out of this repository's history
(``git archive``) and run as a subprocess, on the same database and the same local site.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply
from site_fixture import NS, Site, row_counts

from monitor.cli.commands import main
from monitor.store.schema import changes, notifications

# The last commit of the rules v1 (RULES_VERSION = 1, migrations up to 0002).
OLD = "ddf2767f513092260b9f2cbb4662224b8efe0e7e"
ROOT = Path(__file__).resolve().parents[2]
_RUN = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import monitor.cli as cli; "
        "cli = cli if hasattr(cli, 'main') else "
        "__import__('monitor.cli.commands', fromlist=['main']); "
        "assert cli.__file__.startswith(sys.path[0]), cli.__file__; sys.exit(cli.main())")


@pytest.fixture(scope="module")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The monitor package and migrations of ``OLD``, unpacked in a directory of their own."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("this test needs git and the repository's history (a clone, not a tarball)")
    folder = tmp_path_factory.mktemp("old-release")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD, "monitor", "migrations"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def run_old(old: Path, *args: str) -> tuple[int, Any]:
    env = {**os.environ, "SITEMAP_MONITOR_PARSE_WORKERS": "0"}
    proc = subprocess.run([sys.executable, "-c", _RUN, str(old), *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode in (0, 1, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout) if "--json" in args else proc.stdout


def test_an_upgrade_raises_no_flood_and_no_alert(
    old_release: Path, site: Site, database_url: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = database_url.replace("postgresql+psycopg://", "postgresql://")
    if db.startswith("postgresql"):
        code, _ = run_old(old_release, "db", "upgrade", "--database-url", db)
        assert code == 0
    base = site.url("/")
    rows = [f"<url><loc>{base}p/{i}</loc><lastmod/></url>" for i in range(1000)]
    rows.append(f"<url><loc>{base}bad-priority</loc><priority>1.1</priority></url>")
    rows.append(f"<url><loc>{base}twice</loc></url><url><loc>{base}twice</loc></url>")
    rows.append("<url><loc>/relative</loc></url>")  # invalid under both rules
    site.set("/sitemap.xml", f'<?xml version="1.0"?><urlset xmlns="{NS}">{"".join(rows)}'
                             "</urlset>".encode())
    hook = "/hook"
    site.server.route(hook, Reply(200, b"{}", {"Content-Type": "application/json"}))
    config = tmp_path / "monitor.yaml"
    config.write_text(
        f"targets:\n  - name: cms\n    url: {site.url('/sitemap.xml')}\n"
        "alerts:\n"
        f"  channels:\n    - {{name: hook, type: webhook, url: '{site.url(hook)}'}}\n"
        "  rules:\n"
        "    - {name: new-urls, when: added, channels: [hook]}\n"
        "    - {name: broken, when: invalid, channels: [hook]}\n"
    )
    cli = ["--config", str(config), "--database-url", db, "--json"]

    # The old release: 1,001 of 1,004 URLs invalid; then a quiet check that settles it.
    code, old = run_old(old_release, "check", "cms", *cli)
    assert (old["urls"], old["invalid"]) == (1, 1003)
    code, old = run_old(old_release, "check", "cms", *cli)
    assert old["outcome"] == "unchanged"
    before = row_counts(db, changes, notifications)

    # This release on the same database: its migrations, then a check that reads it all again.
    code = main(["db", "upgrade", "--database-url", db])
    assert code == 0
    capsys.readouterr()
    code = main(["check", "cms", *cli])
    new = json.loads(capsys.readouterr().out)
    assert code == 0
    assert new["outcome"] == "ok"  # read again under the new rules, not skipped as unchanged
    assert (new["urls"], new["invalid"], new["duplicates"]) == (1002, 1, 1)
    assert (new["added"], new["removed"], new["changed"]) == (0, 0, 0)
    assert new["changes"] == []
    after = row_counts(db, changes, notifications)
    assert after == before, "no change row and no notification"

    # And the next real change is seen as one.
    site.set("/sitemap.xml", site.docs["/sitemap.xml"].replace(
        b"</urlset>", f"<url><loc>{base}new</loc></url></urlset>".encode()))
    code = main(["check", "cms", *cli])
    new = json.loads(capsys.readouterr().out)
    assert (new["added"], [c["loc"] for c in new["changes"]]) == (1, [base + "new"])
    notified = row_counts(db, notifications)[0]
    assert notified == before[1] + 1  # the new-urls rule fires, once
