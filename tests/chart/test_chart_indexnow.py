"""IndexNow from the chart's values: the key in a Secret mounted as a file, the daemon's
``defaults.indexnow`` pointing at it, and a config the daemon accepts."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from charttools import helm_template, one, render

KEY = "0123456789abcdef-chart"


def _config(docs: list[dict[str, object]]) -> dict[str, object]:
    data = one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]
    assert isinstance(data, dict)
    return dict(yaml.safe_load(data["config.yaml"]))


def test_off_by_default() -> None:
    docs = render()
    assert "indexnow" not in (_config(docs).get("defaults") or {})
    assert not [d for d in docs if d["kind"] == "Secret"
                and d["metadata"]["name"].endswith("-indexnow")]


def test_key_from_values_in_a_secret_of_the_chart(tmp_path: Path) -> None:
    docs = render(None, "--set", "indexnow.enabled=true", "--set", f"indexnow.key={KEY}",
                  "--set", "indexnow.submit={added,removed}",
                  "--set", "config.targets[0].name=shop",
                  "--set", "config.targets[0].url=https://shop.example/sitemap.xml")
    secret = one(docs, "Secret", "sm-sitemap-monitor-indexnow")
    assert base64.b64decode(secret["data"]["indexnow-key"]).decode() == KEY
    config = _config(docs)
    assert config["defaults"]["indexnow"] == {  # type: ignore[index]
        "enabled": True, "key_file": "/etc/sitemap-monitor-indexnow/key",
        "submit": ["added", "removed"]}
    assert KEY not in yaml.safe_dump(config)
    pod = one(docs, "Deployment")["spec"]["template"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["indexnow-key"]["secret"] == {
        "secretName": "sm-sitemap-monitor-indexnow",
        "items": [{"key": "indexnow-key", "path": "key"}]}
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["indexnow-key"]["mountPath"] == "/etc/sitemap-monitor-indexnow"
    assert "checksum/indexnow" in pod["metadata"]["annotations"]
    # The daemon accepts the rendered file, the key read from where the Secret is mounted.
    from monitor import config as monitor_config

    (tmp_path / "key").write_text(KEY + "\n")
    text = one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]["config.yaml"].replace(
        "/etc/sitemap-monitor-indexnow/key", str(tmp_path / "key"))
    (tmp_path / "config.yaml").write_text(text)
    shop = monitor_config.load(tmp_path / "config.yaml", env={}).resolved_targets()[0]
    assert shop.settings.indexnow.key == KEY
    assert shop.settings.indexnow.submit == ("added", "removed")


def test_key_from_an_existing_secret() -> None:
    docs = render(None, "--set", "indexnow.enabled=true",
                  "--set", "indexnow.existingSecret=seo-keys",
                  "--set", "indexnow.existingSecretKey=bing",
                  "--set", "indexnow.keyLocation=/keys/indexnow.txt")
    assert not [d for d in docs if d["kind"] == "Secret"
                and d["metadata"]["name"].endswith("-indexnow")]
    pod = one(docs, "Deployment")["spec"]["template"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["indexnow-key"]["secret"] == {
        "secretName": "seo-keys", "items": [{"key": "bing", "path": "key"}]}
    assert _config(docs)["defaults"]["indexnow"]["key_location"] == (  # type: ignore[index]
        "/keys/indexnow.txt")


def test_enabled_without_a_key_or_with_a_bad_one_is_refused() -> None:
    result = helm_template("--set", "indexnow.enabled=true", check=False)
    assert result.returncode != 0
    assert "indexnow.enabled needs indexnow.key or indexnow.existingSecret" in result.stderr
    result = helm_template("--set", "indexnow.key=short", check=False)
    assert result.returncode != 0
    assert "/indexnow/key" in result.stderr
