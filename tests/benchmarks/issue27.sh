#!/usr/bin/env bash
# Every figure of the README's issue-27 table, in one run, one benchmark after the other (never
# side by side: each one's CPU and memory are its own). Logs go to OUT (default: a new folder
# under /tmp); the README quotes them. 20-45 minutes on this project's 2-core machine, by
# the day's speed.
#
#     bash tests/benchmarks/issue27.sh [OUT]
#
# Needs the benchmark venv (tests/benchmarks/setup.sh) and the test venv (make
# .venv/.installed-test), and TEST_DATABASE_URL for PostgreSQL (as .ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$(mktemp -d /tmp/issue27-XXXXXX)}
mkdir -p "$out"
bench=.venv-bench/bin/python
test=.venv/bin/python
: "${TEST_DATABASE_URL:?set TEST_DATABASE_URL to a PostgreSQL server (see .ci/run)}"

step() {
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$out/steps.log"
    local t0=$SECONDS
    "$@" > "$out/$name.txt" 2>&1
    echo "   $((SECONDS - t0)) s" | tee -a "$out/steps.log"
}

git log -1 --format='commit %h %s' | tee "$out/steps.log"
# Issue 5's targets, which must keep holding: W1 against the peers and the lxml floor, the
# 304 and one-child re-checks, W2.
step issue5 "$bench" tests/benchmarks/run.py
# Re-checks by how much changed: memory, CPU against the first check, bytes stored.
step recheck "$bench" tests/benchmarks/recheck.py --repeat 2 --results "$out/recheck.json"
# Bytes stored a change over re-checks in a row (a database grows by whole pages).
step recheck-times "$bench" tests/benchmarks/recheck.py --pattern one --pattern percent --times 10
step recheck-every "$bench" tests/benchmarks/recheck.py --pattern every --times 4
# ...and as a CMS that stamps "now" does it: every lastmod a year on at each re-check.
step recheck-forward "$bench" tests/benchmarks/recheck.py --pattern every --times 4 --forward
# The 2.5 M-URL index.
step w4 "$bench" tests/benchmarks/run.py --workload W4 --no-peers --repeat 1
# Queries against a long history.
step history-sqlite "$test" tests/benchmarks/history_queries.py --database sqlite
step history-postgres "$test" tests/benchmarks/history_queries.py --database postgres
# /metrics of 20,000 targets, and a daemon with 20,000 small targets.
step metrics "$test" tests/benchmarks/metrics_scrape.py --targets 20000
step startup-sqlite "$test" tests/benchmarks/daemon_startup.py --database sqlite
step startup-postgres "$test" tests/benchmarks/daemon_startup.py --database postgres
# Scale-out: a full round of 20,000 unchanged targets, one replica and three.
for n in 1 3; do
    step "scale-$n" "$test" tests/benchmarks/daemon_scale.py --database postgres \
        --targets 20000 --interval 1 --seconds 30 --replicas "$n"
done
echo "logs: $out"
