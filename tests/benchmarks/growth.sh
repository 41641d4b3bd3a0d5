#!/usr/bin/env bash
# Issue 25's growth table in one run (README "History's cost"): growth.py on SQLite and on
# PostgreSQL side by side (one process each), W1's shape for the daily and one-child patterns and
# a tenth of it (10 x 5,000 URLs) for the every-lastmod pattern, whose 720 re-checks of W1
# would take over an hour a database here.
#
#     bash tests/benchmarks/growth.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-/tmp/growth-run}"
mkdir -p "$out"
python="${PYTHON:-$here/../../.venv/bin/python}"
cd "$here"
for database in sqlite postgres; do
  (
    "$python" growth.py --database "$database" --pattern daily one \
      --out "$out/$database-w1.json" > "$out/$database-w1.txt" 2> "$out/$database-w1.log"
    "$python" growth.py --database "$database" --pattern every --urls 5000 \
      --out "$out/$database-every.json" > "$out/$database-every.txt" \
      2> "$out/$database-every.log"
  ) &
done
wait
cat "$out"/*.txt
