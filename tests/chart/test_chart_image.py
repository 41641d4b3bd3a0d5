"""The container image: hadolint, then a registry-less podman build and a smoke test.

The build needs no registry: the base is a debootstrap'd Debian (cached under .tools/images)
imported into podman, plus Debian's python3 (tests/chart/ci-base.Containerfile). podman runs
with runc and the sandbox's ulimits through .tools/containers.conf (written by install-tools).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from charttools import ROOT, missing, require_tool, run

from monitor import __version__

BASE = "localhost/bookworm-min:12"
CI_BASE = "localhost/sitemap-monitor-ci-base:12"
IMAGE = "localhost/sitemap-monitor:ci"
IMAGES = ROOT / ".tools" / "images"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def test_hadolint() -> None:
    """The Dockerfile passes hadolint with no finding."""
    hadolint = require_tool("hadolint")
    result = run([hadolint, str(ROOT / "Dockerfile")], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_dockerfile_shape() -> None:
    """Multi-stage, BASE_IMAGE argument, fixed non-root uid, `sitemap-monitor run` by default."""
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.\d+-slim$", text, re.M)
    assert len(re.findall(r"^FROM ", text, re.M)) == 2
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert 'ENTRYPOINT ["sitemap-monitor"]' in text
    assert 'CMD ["run"]' in text
    # The CA bundle for pip is a build argument of the build stage only.
    runtime = text.rsplit("\nFROM ", 1)[1]
    assert "PIP_CERT" not in runtime


def _podman_env() -> dict[str, str]:
    conf = ROOT / ".tools" / "containers.conf"
    if not conf.is_file():
        missing(f"{conf} is missing (run .ci/install-tools)")
    return {"CONTAINERS_CONF": str(conf)}


def _podman(*args: str, check: bool = True,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    podman = require_tool("podman")
    return run([podman, *args], check=check, timeout=timeout, env=_podman_env())


def _has_image(name: str) -> bool:
    return _podman("image", "exists", name, check=False).returncode == 0


def _debian_mirror() -> str:
    """The Debian mirror apt already uses (the only package source this machine reaches)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    listing = Path("/etc/apt/sources.list")
    if listing.is_file():
        for line in listing.read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1]
    pytest.fail("no Debian mirror found in the apt sources")


def _base_image() -> None:
    """localhost/bookworm-min:12 from a cached debootstrap tarball (made once, ~40 s)."""
    if _has_image(BASE):
        return
    tarball = IMAGES / "bookworm-min.tar"
    if not tarball.is_file():
        debootstrap = require_tool("debootstrap")
        IMAGES.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=IMAGES) as tree:
            run([debootstrap, "--variant=minbase", "bookworm", tree, _debian_mirror()],
                timeout=900)
            partial = tarball.with_suffix(".partial")
            run(["tar", "-C", tree, "-cf", str(partial), "."], timeout=300)
            partial.rename(tarball)
    _podman("import", str(tarball), BASE)


@pytest.fixture(scope="module")
def image() -> str:
    """The project's image, built from the Dockerfile on the CI base."""
    require_tool("podman")
    require_tool("runc")
    _base_image()
    if not _has_image(CI_BASE):
        _podman("build", "--network", "host", "-t", CI_BASE, "-f",
                str(Path(__file__).parent / "ci-base.Containerfile"), str(ROOT))
    args = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={CI_BASE}", "-t", IMAGE]
    if HOST_CA.is_file():
        args += ["--volume", f"{HOST_CA}:/run/host-ca.crt:ro",
                 "--build-arg", "PIP_CERT=/run/host-ca.crt"]
    _podman(*args, str(ROOT))
    return IMAGE


@pytest.mark.slow
def test_image_version(image: str) -> None:
    """`sitemap-monitor --version` in the read-only, capability-less container."""
    result = _podman("run", "--rm", "--read-only", "--cap-drop=ALL", "--security-opt",
                     "no-new-privileges", image, "--version")
    assert result.stdout.strip() == f"sitemap-monitor {__version__}"


@pytest.mark.slow
def test_image_runs_as_fixed_non_root_user(image: str) -> None:
    """The image's user is the uid/gid the chart's securityContext expects."""
    user = _podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user == "10001:10001"
    entrypoint = _podman("image", "inspect", "--format", "{{.Config.Entrypoint}} {{.Config.Cmd}}",
                         image).stdout.strip()
    assert entrypoint == "[sitemap-monitor] [run]"
    env = _podman("image", "inspect", "--format", "{{.Config.Env}}", image).stdout
    assert "PIP_CERT" not in env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.fixture
def container(image: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The daemon running detached: read-only root, no capabilities, config mounted."""
    port = _free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"listen: 127.0.0.1:{port}\ntargets: []\n", encoding="utf-8")
    config.chmod(0o644)
    name = f"sitemap-monitor-smoke-{os.getpid()}"
    _podman("rm", "--force", "--ignore", name)
    _podman("run", "--detach", "--name", name, "--network", "host", "--read-only",
            "--cap-drop=ALL", "--security-opt", "no-new-privileges",
            "--volume", f"{config}:/etc/sitemap-monitor/config.yaml:ro",
            "--env", "SITEMAP_MONITOR_CONFIG=/etc/sitemap-monitor/config.yaml", image)
    try:
        yield name, port
    finally:
        _podman("rm", "--force", "--volumes", name, check=False)


@pytest.mark.slow
def test_container_serves_healthz_and_stops_cleanly(container: tuple[str, int]) -> None:
    """The daemon answers /healthz for a few seconds, then `podman stop` ends it with 0."""
    name, port = container
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while _status(base + "/healthz") != 200:
        state = _podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            logs = _podman("logs", name, check=False)
            pytest.fail(f"/healthz never answered (container {state}):\n{logs.stdout}{logs.stderr}")
        time.sleep(0.5)
    for _ in range(3):
        assert _status(base + "/healthz") == 200
        time.sleep(1)
    assert _status(base + "/readyz") == 200
    with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
        assert b"sitemap_monitor_build_info" in response.read()
    _podman("stop", "--time", "25", name)
    code = _podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    assert code == "0", _podman("logs", name, check=False).stderr


@pytest.mark.slow
def test_chart_pod_spec_runs_in_the_image(image: str, tmp_path: Path) -> None:
    """The Deployment as the chart renders it (init migration, args, env, config) works.

    podman stands in for the kubelet: the init container's `db upgrade`, then the daemon with
    the chart's args, env (the Secret's database URL) and ConfigMap, both read-only on one
    /data volume; the probes' paths answer and the daemon checks a local sitemap.
    """
    import base64
    import json

    import yaml
    from charttools import one, render
    from httpserver import Reply, TestServer

    with TestServer() as site:
        site.route("/sitemap.xml", Reply(body=b'<urlset xmlns="http://www.sitemaps.org/schemas/'
                                              b'sitemap/0.9"><url><loc>' + site.url("/a").encode()
                                              + b"</loc></url></urlset>"))
        port = _free_port()
        targets = json.dumps([{"name": "local", "url": site.url("/sitemap.xml")}])
        # No jitter: the first check runs at once instead of within 10 % of the interval.
        docs = render("default-values.yaml", "--set", f"containerPort={port}",
                      "--set-json", f"config.targets={targets}",
                      "--set-json", "config.defaults.jitter=0")
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        secret = {k: base64.b64decode(v).decode() for k, v in one(docs, "Secret")["data"].items()}
        config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
        assert config["listen"] == f"0.0.0.0:{port}"
        config["listen"] = f"127.0.0.1:{port}"  # tests listen on loopback only
        config_dir = tmp_path / "config"
        config_dir.mkdir()
        (config_dir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        # The container's uid 10001 must read the mounted config.
        os.chmod(config_dir, 0o755)  # noqa: S103
        os.chmod(config_dir / "config.yaml", 0o644)

        def podman_args(container: dict[str, object]) -> list[str]:
            args = ["--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges",
                    "--network", "host", "--user", "10001:10001", "--volume", f"{volume}:/data",
                    "--volume", f"{config_dir}:/etc/sitemap-monitor:ro"]
            for env in container["env"]:  # type: ignore[attr-defined]
                value = env.get("value")
                if value is None:
                    value = secret[env["valueFrom"]["secretKeyRef"]["key"]]
                args += ["--env", f"{env['name']}={value}"]
            return args

        volume = f"sitemap-monitor-data-{os.getpid()}"
        name = f"sitemap-monitor-chart-{os.getpid()}"
        _podman("volume", "create", volume)
        try:
            init = pod["initContainers"][0]
            _podman("run", "--rm", *podman_args(init), image, *init["args"])
            main = pod["containers"][0]
            _podman("run", "--detach", "--name", name, *podman_args(main), image, *main["args"])
            base = f"http://127.0.0.1:{port}"
            probes = [main[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")]
            deadline = time.monotonic() + 30
            while not all(_status(base + path) == 200 for path in probes):
                if time.monotonic() > deadline:
                    pytest.fail(_podman("logs", name, check=False).stderr)
                time.sleep(0.5)
            checked = re.compile(rb'^sitemap_monitor_urls\{target="local"\} 1\.0$', re.M)
            while not checked.search(metrics := _body(base + "/metrics")):
                if time.monotonic() > deadline:
                    logs = _podman("logs", name, check=False)
                    pytest.fail(f"the local sitemap was not checked:\n{metrics.decode()}\n"
                                f"{logs.stdout}{logs.stderr}")
                time.sleep(0.5)
            _podman("stop", "--time", "25", name)
            code = _podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
            assert code == "0"
        finally:
            _podman("rm", "--force", name, check=False)
            _podman("volume", "rm", "--force", volume, check=False)


def _body(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bytes(response.read())
    except OSError:
        return b""
