#!/usr/bin/env bash
# Creates the benchmark venv (.venv-bench): the project itself plus the peers it is measured
# against. ultimate-sitemap-parser is GPL-3.0 and linkchecker (W3, url_health.py) is GPL-2.0:
# they live only here, never in pyproject.toml.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${BENCH_VENV:-$root/.venv-bench}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -e "$root"
# Compiled as a wheel install (the image) would be: the editable one is not.
"$venv/bin/python" -m compileall -q "$root/monitor"
"$venv/bin/pip" install --quiet \
    "advertools>=0.16" \
    "ultimate-sitemap-parser>=1.0" \
    "py-spy>=0.3.14" \
    "linkchecker>=10.2"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("sitemap-monitor", "advertools", "ultimate-sitemap-parser", "linkchecker", "lxml",
             "pandas"):
    print(f"{name}=={md.version(name)}")
PY
