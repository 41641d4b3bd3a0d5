"""The chart renders, lints and validates, for each scenario under helm/sitemap-monitor/ci/."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the test deps
import pytest
import yaml
from charttools import (
    CHART,
    MONITORING_APIS,
    ROOT,
    SCENARIOS,
    find,
    helm_template,
    missing,
    newest_kubernetes_version,
    one,
    render,
    require_tool,
    run,
)

SCHEMAS = Path(__file__).parent / "schemas"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_strict(scenario: str) -> None:
    """helm lint --strict passes with every scenario's values."""
    helm = require_tool("helm")
    result = run([helm, "lint", "--strict", str(CHART), "-f", str(CHART / "ci" / scenario)])
    assert "0 chart(s) failed" in result.stdout


def test_scenarios_exist() -> None:
    """The three scenarios of the issue are there: defaults, PostgreSQL, everything on."""
    assert {"default-values.yaml", "postgresql-values.yaml", "full-values.yaml"} <= set(SCENARIOS)


@pytest.mark.parametrize("version", ["1.30.0", "newest"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kubernetes_validate_strict(scenario: str, version: str, tmp_path: Path) -> None:
    """Every manifest is valid Kubernetes (strict: no unknown fields) for 1.30 and the newest."""
    exe = require_tool("kubernetes-validate")
    k8s = newest_kubernetes_version() if version == "newest" else version
    out = helm_template("-f", str(CHART / "ci" / scenario), apis=MONITORING_APIS).stdout
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(out, encoding="utf-8")
    result = run([exe, "--strict", "-k", k8s, str(manifests)], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # Only the CRD kinds may be unknown to it; they are checked by test_crd_kinds_*.
    unknown = re.findall(r"Couldn't find schema for kind (\w+)", result.stdout + result.stderr)
    assert set(unknown) <= {"ServiceMonitor", "PrometheusRule"}
    assert result.stdout.count(" passed for resource ") == len(
        [d for d in yaml.safe_load_all(out) if d and d["kind"] not in unknown]
    )


def _monitoring_docs() -> list[dict[str, Any]]:
    docs = render("full-values.yaml", apis=MONITORING_APIS)
    return find(docs, "ServiceMonitor") + find(docs, "PrometheusRule")


def test_crd_kinds_match_strict_schema() -> None:
    """ServiceMonitor and PrometheusRule match the CRDs' structure, with objects closed."""
    docs = _monitoring_docs()
    assert sorted(d["kind"] for d in docs) == ["PrometheusRule", "ServiceMonitor"]
    for doc in docs:
        schema = json.loads((SCHEMAS / f"{doc['kind'].lower()}.schema.json").read_text())
        jsonschema.validate(doc, schema)
        # The check can fail: an unknown field and a malformed duration are rejected.
        broken = json.loads(json.dumps(doc))
        broken["spec"]["bogus"] = True
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    schema = json.loads((SCHEMAS / "servicemonitor.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema)


def _node_validate(docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    node = require_tool("node")
    npm_root = ROOT / ".tools" / "npm"
    if not (npm_root / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir():
        missing("the CRD schema package is not installed (run .ci/install-tools)")
    return run([node, str(Path(__file__).parent / "validate_crds.mjs"), str(npm_root)],
               input=json.dumps(docs), check=False)


def test_crd_kinds_match_published_crd_schema() -> None:
    """They also validate against the full CRD schemas of prometheus-operator (npm package)."""
    docs = _monitoring_docs()
    result = _node_validate(docs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == 2
    broken = json.loads(json.dumps(docs))
    broken[0]["spec"]["endpoints" if broken[0]["kind"] == "ServiceMonitor" else "groups"] = "x"
    assert _node_validate(broken).returncode == 1


def test_defaults_sqlite_single_replica() -> None:
    """Defaults: SQLite on a PVC, one replica, Recreate, migration in an init container."""
    docs = render("default-values.yaml")
    deploy = one(docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert [c["args"] for c in pod["initContainers"]] == [["db", "upgrade"]]
    claim = one(docs, "PersistentVolumeClaim")
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/data", "/tmp", "/etc/sitemap-monitor"} <= mounts
    secret = one(docs, "Secret")
    assert "database-url" in secret["data"]
    assert base64.b64decode(secret["data"]["database-url"]).decode() == (
        "sqlite:////data/sitemap-monitor.db"
    )
    assert not find(docs, "Job"), "no hook Job on SQLite: it could not mount the volume"
    for kind in ("ServiceMonitor", "PrometheusRule", "NetworkPolicy", "PodDisruptionBudget"):
        assert not find(docs, kind), f"{kind} must be off by default"
    assert not [d for d in find(docs, "ConfigMap") if "dashboards" in d["metadata"]["name"]]


def test_defaults_render_nothing_optional_even_with_crds() -> None:
    """Off by default means off, even when the cluster has the CRDs."""
    docs = render(apis=MONITORING_APIS)
    assert not find(docs, "ServiceMonitor")
    assert not find(docs, "PrometheusRule")


def test_probes_and_config() -> None:
    """Probes hit /healthz and /readyz on the port the config makes the daemon listen on."""
    docs = render("default-values.yaml", "--set", "containerPort=9000")
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["args"][0] == "run"
    env = {e["name"]: e for e in container["env"]}
    assert env["SITEMAP_MONITOR_CONFIG"]["value"] == "/etc/sitemap-monitor/config.yaml"
    assert "secretKeyRef" in env["SITEMAP_MONITOR_DATABASE_URL"]["valueFrom"]
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    assert config["listen"] == "0.0.0.0:9000"
    assert config["targets"] == [{"name": "example", "url": "https://www.example.com/sitemap.xml"}]
    assert "database_url" not in config


def test_rendered_config_is_accepted_by_the_daemon(tmp_path: Path) -> None:
    """The ConfigMap of every scenario loads with monitor.config (unknown keys are errors)."""
    from monitor import config as monitor_config
    from monitor.serve.auth import hash_password

    # The web scenario's files, where its Secrets would be mounted.
    mounted = {"/etc/sitemap-monitor-web/": tmp_path / "web", "/etc/sitemap-monitor-tls/":
               tmp_path / "tls"}
    for folder in mounted.values():
        folder.mkdir()
    (tmp_path / "web" / "users.yaml").write_text(f"seo: '{hash_password('pw', rounds=4)}'\n")
    (tmp_path / "tls" / "tls.crt").write_text("a certificate")
    (tmp_path / "tls" / "tls.key").write_text("a key")
    for scenario in SCENARIOS:
        docs = render(scenario)
        text = one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]["config.yaml"]
        for mount, folder in mounted.items():
            text = text.replace(mount, f"{folder}/")
        file = tmp_path / f"{scenario}.yaml"
        file.write_text(text, encoding="utf-8")
        env = {"SLACK_WEBHOOK_URL": "https://hooks.invalid/x", "HOOK_SECRET": "s"}
        loaded = monitor_config.load(file, env=env)
        assert loaded.listen == "0.0.0.0:8080"


def test_checksum_config_rolls_pods() -> None:
    """A config change changes the pod template's checksum/config annotation."""
    def checksum(*args: str) -> str:
        deploy = one(render("default-values.yaml", *args), "Deployment")
        return str(deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() == checksum()
    assert checksum() != checksum("--set", "config.defaults.interval=5m")


def test_secure_security_context_everywhere() -> None:
    """Every container of every scenario is non-root, read-only, unprivileged, capability-free."""
    for scenario in SCENARIOS:
        docs = render(scenario, apis=MONITORING_APIS)
        pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]
        pods += [d["spec"] for d in find(docs, "Pod")]
        assert pods
        for pod in pods:
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] != 0
            assert pod["automountServiceAccountToken"] is False
            for container in pod.get("initContainers", []) + pod["containers"]:
                sc = container["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, container["name"]
                assert sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"]["drop"] == ["ALL"]


def test_selectors_never_use_the_chart_label() -> None:
    """helm.sh/chart changes every release; a selector with it would orphan pods."""
    docs = render("full-values.yaml", apis=MONITORING_APIS)
    selectors = [one(docs, "Deployment")["spec"]["selector"]["matchLabels"],
                 one(docs, "Service")["spec"]["selector"],
                 one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"],
                 one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
                 one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]]
    for selector in selectors:
        assert selector == {"app.kubernetes.io/name": "sitemap-monitor",
                            "app.kubernetes.io/instance": "sm"}
    assert one(docs, "Deployment")["metadata"]["labels"]["helm.sh/chart"].startswith("sitemap-")


def test_postgresql_replicas_and_migration_hook() -> None:
    """PostgreSQL: N replicas rolling, and a pre-install/pre-upgrade Job reading existingSecret."""
    docs = render("postgresql-values.yaml")
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 3
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deploy["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert not [v for v in pod["volumes"] if v["name"] == "data"]
    assert not find(docs, "PersistentVolumeClaim")
    assert not find(docs, "Secret"), "existingSecret: the chart creates no Secret"
    job = one(docs, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["db", "upgrade"]
    ref = {e["name"]: e for e in container["env"]}["SITEMAP_MONITOR_DATABASE_URL"]
    assert ref["valueFrom"]["secretKeyRef"] == {"name": "sitemap-monitor-db", "key": "url"}
    # The release's ServiceAccount does not exist yet when a pre-install hook runs.
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]


def test_migration_hook_gets_its_own_secret_before_the_release_secret() -> None:
    """Without existingSecret the Job reads a hook Secret created (lower weight) before it."""
    docs = render("full-values.yaml", apis=MONITORING_APIS)
    job = one(docs, "Job")
    ref = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    secret_name = ref["SITEMAP_MONITOR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"]
    hook_secret = one(docs, "Secret", secret_name)
    release_secret = one(docs, "Secret", "sm-sitemap-monitor")
    assert "helm.sh/hook" not in release_secret["metadata"].get("annotations", {})
    hook = hook_secret["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == job["metadata"]["annotations"]["helm.sh/hook"]
    job_weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert int(hook["helm.sh/hook-weight"]) < job_weight
    assert hook_secret["data"] == release_secret["data"]


def test_sqlite_refuses_replicas() -> None:
    """SQLite with more than one replica is refused at render time, with the reason."""
    result = helm_template("--set", "replicaCount=2", check=False)
    assert result.returncode != 0
    assert "SQLite allows one replica only" in result.stderr


def test_postgresql_needs_a_url() -> None:
    """PostgreSQL without a URL or existingSecret is refused with what to set."""
    result = helm_template("--set", "database.type=postgresql", check=False)
    assert result.returncode != 0
    assert "database.url or database.existingSecret" in result.stderr


def test_everything_on() -> None:
    """The full scenario renders every optional part with the settings it asks for."""
    docs = render("full-values.yaml", apis=MONITORING_APIS)
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    rule = one(docs, "PrometheusRule")
    alerts = [r["alert"] for r in rule["spec"]["groups"][0]["rules"]]
    assert "SitemapMonitorShopTooSmall" in alerts
    for r in rule["spec"]["groups"][0]["rules"][:-1]:
        assert r["labels"]["team"] == "seo"
        assert r["annotations"]["runbook_url"].startswith("https://runbooks.example.com/")
    dashboards = one(docs, "ConfigMap", "sm-sitemap-monitor-dashboards")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboards["metadata"]["annotations"] == {"grafana_folder": "SEO"}
    json.loads(dashboards["data"]["sitemap-monitor.json"])
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    peers = [peer for rule_ in policy["spec"]["egress"] for peer in rule_.get("to", [])]
    blocks = [peer["ipBlock"] for peer in peers if "ipBlock" in peer]
    assert {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]} in blocks
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "sitemap-monitor",
                                     "app.kubernetes.io/instance": "sm"}},
    }


def test_crd_kinds_gated_on_the_api() -> None:
    """Enabled but without the prometheus-operator API, they are not rendered."""
    docs = render("full-values.yaml")
    assert not find(docs, "ServiceMonitor")
    assert not find(docs, "PrometheusRule")
    assert find(docs, "NetworkPolicy"), "only the CRD kinds depend on the API"
    with_one = render("full-values.yaml", apis=MONITORING_APIS[:1])
    assert find(with_one, "ServiceMonitor")
    assert not find(with_one, "PrometheusRule")


def test_dashboard_label_is_configurable() -> None:
    """The sidecar label and value follow dashboards.label / labelValue."""
    docs = render("default-values.yaml", "--set", "dashboards.enabled=true", "--set",
                  "dashboards.label=my_dashboards", "--set", "dashboards.labelValue=yes",
                  "--set", "dashboards.namespace=grafana")
    cm = one(docs, "ConfigMap", "sm-sitemap-monitor-dashboards")
    assert cm["metadata"]["labels"]["my_dashboards"] == "yes"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["namespace"] == "grafana"


def _api_url_default(*args: str) -> tuple[str, str]:
    """The rendered dashboard's api_url default, and the dashboard's JSON text."""
    docs = render("default-values.yaml", "--set", "dashboards.enabled=true", *args)
    text = one(docs, "ConfigMap", "sm-sitemap-monitor-dashboards")["data"]["sitemap-monitor.json"]
    variables = {v["name"]: v for v in json.loads(text)["templating"]["list"]}
    api_url = variables["api_url"]
    assert api_url["current"]["value"] == api_url["current"]["text"] == api_url["query"]
    assert api_url["options"] == [{"selected": True, "text": api_url["query"],
                                   "value": api_url["query"]}]
    return api_url["query"], text


def test_dashboard_api_url_is_configurable() -> None:
    """dashboards.apiUrl becomes the api_url variable's default, and only that changes."""
    default, shipped = _api_url_default()
    assert default == "http://127.0.0.1:8080"
    url, text = _api_url_default("--set", "dashboards.apiUrl=https://sitemaps.example.com/")
    assert url == "https://sitemaps.example.com"
    assert text == shipped.replace('"http://127.0.0.1:8080"', '"https://sitemaps.example.com"')
    assert text.count("https://sitemaps.example.com") == 5, "the variable's five places"
    rejected = helm_template("--set", "dashboards.apiUrl=sitemaps.example.com", check=False)
    assert rejected.returncode != 0
    assert "/dashboards/apiUrl" in rejected.stderr, rejected.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "replicaCount=three"], "/replicaCount"),
        (["--set", "service.port=http"], "/service/port"),
        (["--set", "serviceMonitor.enabled=yes"], "/serviceMonitor/enabled"),
        (["--set", "database.type=mysql"], "/database/type"),
        (["--set", "bogus=1"], "'bogus' not allowed"),
        (["--set", "image.tga=1.0"], "'tga' not allowed"),
        (["--set", "prometheusRule.rules.massRemoval.treshold=5"], "'treshold' not allowed"),
        (["--set", "config.database_url=sqlite://"], "'database_url' not allowed"),
    ],
)
def test_values_schema_rejects(args: list[str], message: str) -> None:
    """values.schema.json rejects wrong types and unknown keys: helm template fails."""
    result = helm_template(*args, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_values_schema_is_closed() -> None:
    """Every object in values.schema.json that lists properties is closed."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                assert node.get("additionalProperties") is False, where
            for key, child in node.items():
                walk(child, f"{where}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}[{i}]")

    walk(schema, "")


def test_readme_values_table_up_to_date() -> None:
    """The committed chart README matches what helm/values_readme.py generates."""
    import sys

    result = run([sys.executable, str(ROOT / "helm" / "values_readme.py"), "--check"], check=False)
    assert result.returncode == 0, result.stderr


def test_readme_generator_notices_an_undocumented_key(tmp_path: Path) -> None:
    """The README check can fail: a key without a comment and a stale table are reported."""
    import sys

    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "values.yaml").write_text("# -- documented\na: 1\nb: 2\n", encoding="utf-8")
    (chart / "README.md").write_text(
        "x\n<!-- values-table:start -->\n<!-- values-table:end -->\n", encoding="utf-8"
    )
    script = str(ROOT / "helm" / "values_readme.py")
    missing = run([sys.executable, script, "--chart", str(chart), "--check"], check=False)
    assert missing.returncode == 1
    assert "b" in missing.stderr
    (chart / "values.yaml").write_text("# -- documented\na: 1\n", encoding="utf-8")
    stale = run([sys.executable, script, "--chart", str(chart), "--check"], check=False)
    assert stale.returncode == 1
    assert "stale" in stale.stderr
    run([sys.executable, script, "--chart", str(chart)])
    assert "| `a` | int | `1` | documented |" in (chart / "README.md").read_text()


def test_dashboard_has_the_panels_and_target_variable() -> None:
    """The Grafana dashboard has a target variable and the panels the issue lists."""
    dashboard = json.loads((CHART / "dashboards" / "sitemap-monitor.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["target"]["includeAll"] is True
    assert "sitemap_monitor_" in variables["target"]["definition"]
    titles = {p["title"] for p in dashboard["panels"]}
    for wanted in ("URLs per target", "Changes by kind", "Invalid entries by rule",
                   "Check duration (p50, p95)", "Failures per target", "Time since last success",
                   "Alert deliveries", "Fetched bytes", "Changes by kind per target",
                   "Current issues by rule"):
        assert wanted in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            # Per-target metrics follow the variable; the outbox and alerts have no target label.
            if not re.search(r"sitemap_monitor_(alerts_|build_info)", expr):
                assert 'target=~"$target"' in expr, (panel["title"], expr)


def test_values_schema_config_keys_match_the_daemon() -> None:
    """The config part of values.schema.json allows exactly the daemon's keys."""
    from monitor import config as monitor_config

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    props = schema["properties"]
    top = set(monitor_config.Config.model_fields) - {"database_url", "listen"}
    assert set(props) == top
    # auth is a target's own, resolved into its settings: refused under defaults.
    assert set(props["defaults"]["properties"]) == set(monitor_config.Defaults.model_fields) - {
        "auth"}
    assert set(props["targets"]["items"]["properties"]) == set(
        monitor_config.TargetSpec.model_fields
    )
    assert set(props["scheduler"]["properties"]) == set(monitor_config.Scheduler.model_fields)
    assert set(props["http"]["properties"]) == set(monitor_config.Http.model_fields)
    assert set(props["alerts"]["properties"]) == set(monitor_config.Alerts.model_fields)
    assert set(props["alerts"]["properties"]["delivery"]["properties"]) == set(
        monitor_config.Delivery.model_fields)


def test_web_access_from_secrets() -> None:
    """web.usersSecret and web.tlsSecret: the Secrets mounted, the config pointing at them,
    the probes and the ServiceMonitor over HTTPS, the scrape with basic auth."""
    docs = render("web-values.yaml", apis=MONITORING_APIS)
    config = yaml.safe_load(one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]["config.yaml"])
    assert config["web"] == {
        "basic_auth_users_file": "/etc/sitemap-monitor-web/users.yaml", "protect_metrics": True,
        "tls_cert_file": "/etc/sitemap-monitor-tls/tls.crt",
        "tls_key_file": "/etc/sitemap-monitor-tls/tls.key"}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["web-users"]["secret"]["secretName"] == "sitemap-monitor-web-users"
    assert volumes["web-tls"]["secret"]["secretName"] == "sitemap-monitor-tls"
    container = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["web-users"] == "/etc/sitemap-monitor-web"
    assert mounts["web-tls"] == "/etc/sitemap-monitor-tls"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["basicAuth"]["password"] == {"name": "sitemap-monitor-scrape",
                                                 "key": "password"}
    assert endpoint["tlsConfig"]["serverName"] == "sitemap-monitor"
    # without web: nothing of it
    plain = render("default-values.yaml", apis=MONITORING_APIS)
    container = one(plain, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "scheme" not in container["livenessProbe"]["httpGet"]
    assert "web" not in yaml.safe_load(one(plain, "ConfigMap", "sm-sitemap-monitor")["data"][
        "config.yaml"])
