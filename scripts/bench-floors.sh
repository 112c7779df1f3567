#!/usr/bin/env bash
# The floors of docs/benchmarks.md, this build paired against another commit's in one run:
#   make bench-floors BASE=<commit>             # default BASE: the commit before HEAD
#   FLOORS="decision sim submit e2e" ROUNDS=2 scripts/bench-floors.sh <commit>
# BASE is built in a worktree (build-floors/<commit>/, RelWithDebInfo, through ccache); each
# floor then runs ROUNDS times for both builds, alternated (which goes first too), and
# one table gives both figures per floor (the median of the rounds) and their ratio. Floors:
#   decision  core_bench BM_Decision at 10,000 nodes (median CPU time): ns per decision, lower is better
#   sim       dgpu-sim scale run, 10,000 x 8 GPUs, Philly x10 (bench/run_sim_bench.py): decisions/s
#   submit    bench/run_rest_bench.sh (durable, 64 connections, 6 s): accepted/s and p99
#   e2e       bench/run_e2e_bench.sh (5,000 tasks of `true`, 4 agents x 8 fake GPUs): tasks/s
#   fleet     bench/run_fleet_bench.sh, 10,000 agents (20 s): the scheduler's CPU cores (slow)
#   queue     bench/run_queue_bench.sh, 1,000,000 pending (slow: several minutes a build)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BASE=${1:-${BASE:-HEAD~1}}
FLOORS=${FLOORS:-decision sim submit e2e}
ROUNDS=${ROUNDS:-2}
TRACE=${DGPU_TRACE:-$REPO/../shared/traces/philly.csv}
base_sha=$(git rev-parse --short "$BASE")
head_sha=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src sim bench || echo "+changes")
OUT=$(mktemp -d /tmp/dgpu-floors.XXXXXX)

# The base build, in a worktree of its own (kept between runs: a second run is incremental).
tree=$REPO/build-floors/$base_sha
if [[ ! -d $tree ]]; then
  mkdir -p "$REPO/build-floors"
  git worktree add --detach "$tree" "$base_sha" >/dev/null
fi
echo "== building $base_sha in $tree"
# Through ccache as this build is (older commits do not set it up themselves): unchanged files
# are not compiled again.
launcher=()
if command -v ccache >/dev/null; then
  l="env;CCACHE_BASEDIR=$tree;CCACHE_NOHASHDIR=true;$(command -v ccache)"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$l" -DCMAKE_CXX_COMPILER_LAUNCHER="$l")
fi
cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDGPU_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build "$tree/build" -j "$(nproc)" --target dgpu-scheduler dgpu-agent dgpu-task-shim \
  dgpuctl dgpu-sim core_bench agent_loadgen 2>&1 | tail -1
echo "== building $head_sha"
cmake --build build -j "$(nproc)" --target dgpu-scheduler dgpu-agent dgpu-task-shim dgpuctl \
  dgpu-sim core_bench agent_loadgen 2>&1 | tail -1
declare -A BIN=([base]=$tree/build/bin [head]=$REPO/build/bin)

# One figure (and for submit a second one) of floor $1 with the binaries in $2, on stdout.
measure() {
  local floor=$1 bin=$2
  case $floor in
    decision)
      "$bin/core_bench" --benchmark_filter='^BM_Decision/nodes:10000/record_changes:0(/resources:0)?/repeats' \
        --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null |
        python3 -c 'import json,sys; b=[b for b in json.load(sys.stdin)["benchmarks"] if b.get("aggregate_name") == "median"][0]; print("%.0f" % b["cpu_time"])' ;;
    sim)
      python3 bench/run_sim_bench.py --sim "$bin/dgpu-sim" --trace "$TRACE" --scale 400 1000 \
        --runs 1 2>&1 | grep -oE '[0-9,]+ decisions/s' | tail -1 | cut -d' ' -f1 | tr -d , ;;
    submit)
      DGPU_BIN_DIR=$bin DURATION=6s bash bench/run_rest_bench.sh 2>&1 |
        awk '/^accepted submissions\/s:/ { print $3 }' ;;
    e2e)
      DGPU_BIN_DIR=$bin TOTAL=5000 bash bench/run_e2e_bench.sh 2>&1 |
        grep -oE '[0-9]+ tasks/s completed' | cut -d' ' -f1 ;;
    fleet)
      DGPU_BIN_DIR=$bin AGENTS=10000 RATE=1000 DURATION=20 bash bench/run_fleet_bench.sh 2>&1 |
        awk '/^scheduler CPU:/ { print $3 }' ;;
    queue)
      DGPU_BIN_DIR=$bin bash bench/run_queue_bench.sh 2>&1 |
        grep -oE 'submission rate at [0-9]+ pending: [0-9.]+' | tail -1 | awk '{ print $NF }' ;;
  esac
}

for floor in $FLOORS; do
  for round in $(seq "$ROUNDS"); do
    # Which goes first alternates: a run can leave the machine (disk, caches) slower or faster.
    sides="base head"
    (( round % 2 == 0 )) && sides="head base"
    for side in $sides; do
      v=$(measure "$floor" "${BIN[$side]}" || true)
      echo "$floor $side $round ${v:-?}" | tee -a "$OUT/figures"
    done
  done
done

python3 - "$OUT/figures" "$base_sha" "$head_sha" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    floor, side, _, v = line.split()
    try:
        rows.setdefault(floor, {}).setdefault(side, []).append(float(v))
    except ValueError:
        rows.setdefault(floor, {}).setdefault(side, [])
units = {"decision": "ns/decision (lower is better)", "sim": "decisions/s", "submit": "accepted/s",
         "e2e": "tasks/s", "fleet": "scheduler cores (lower is better)", "queue": "submissions/s at 1M pending"}
print("\n| floor | unit | %s | %s | ratio |" % (sys.argv[2], sys.argv[3]))
print("|---|---|---|---|---|")
for floor, sides in rows.items():
    b = statistics.median(sides["base"]) if sides.get("base") else None
    h = statistics.median(sides["head"]) if sides.get("head") else None
    ratio = "%.2fx" % (h / b) if b and h else "-"
    fmt = lambda x: "-" if x is None else "{:,.0f}".format(x) if x >= 100 else "%.2f" % x
    print("| %s | %s | %s | %s | %s |" % (floor, units[floor], fmt(b), fmt(h), ratio))
PY
