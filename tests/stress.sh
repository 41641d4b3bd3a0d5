#!/usr/bin/env bash
# `make test` RUNS times in a row (default 3) with two CPU burners beside it the whole time, as
# on a busy machine: the suite must pass every time. The burners are stress-ng (Debian's
# package, installed here when missing and apt-get can) or else two busy Python loops; both
# are ended, by their process ids, however this script ends. STRESS_COMMAND runs something
# else than `make test` under the same load (a few test files, say).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
command="${STRESS_COMMAND:-make test}"
burners=()
stop_burners() {
    for pid in "${burners[@]}"; do kill "${pid}" 2>/dev/null || true; done
    for pid in "${burners[@]}"; do wait "${pid}" 2>/dev/null || true; done
}
trap stop_burners EXIT

if ! command -v stress-ng >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]] \
        && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng; } \
        >/dev/null 2>&1 || true
fi
if command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu 2 --quiet &
    burners+=("$!")
    echo "test-stress: stress-ng --cpu 2 (pid ${burners[0]})"
else
    for _ in 1 2; do
        python3 -c 'while True: pass' &
        burners+=("$!")
    done
    echo "test-stress: two busy Python loops (pids ${burners[*]})"
fi

failed=0
for run in $(seq 1 "${runs}"); do
    started=$SECONDS
    if bash -c "${command}"; then status=passed; else status=FAILED; failed=$((failed + 1)); fi
    echo "test-stress: run ${run} of ${runs} (${command}) ${status} in $((SECONDS - started)) s" \
         "(load $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "test-stress: ${failed} of ${runs} runs failed"
exit $((failed > 0))
