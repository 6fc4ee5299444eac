#!/usr/bin/env bash
# floor-pair.sh: tether's cost a job read against the floor's in the same sitting (issue 55).
#   bash docs/floor-pair.sh [TETHER_BIN [JOBS [PAIRS [FLOOR_BIN]]]]
# For each pair: `tether bench --jobs JOBS` on a fresh server and data dir, then
# `benchfloor --jobs JOBS`, each server under `perf stat -p` (the floor's is its -serve child), and
# prints a line per run: jobs/s, the server's CPU a job (task-clock), futex, nanosleep and context
# switches a job and their sum, syscalls a job, and the load generator's CPU a job. Needs perf
# (apt install linux-perf) and root or perf_event_paranoid <= 1; python3 and curl; the floor built
# first (go build -o bin/benchfloor ./cmd/benchfloor). To compare two
# builds, alternate them: `for i in 1 2 3; do bash docs/floor-pair.sh old 20000 1; bash
# docs/floor-pair.sh bin/tether 20000 1; done`.
# A missing binary or perf, a JOBS or PAIRS that is not a whole number above 0, or a step that
# fails stops it with a message and exit 1; the trap kills what it started and removes its dirs.
. "$(dirname "$0")/bench-lib.sh"
BIN=${1:-bin/tether}; JOBS=${2:-20000}; PAIRS=${3:-3}; FLOOR=${4:-bin/benchfloor}
need_exec "$BIN" TETHER_BIN "go build -o bin/tether ./cmd/tether"
need_exec "$FLOOR" FLOOR_BIN "go build -o bin/benchfloor ./cmd/benchfloor"
need_count JOBS "$JOBS"; need_count PAIRS "$PAIRS"
need_cmd perf "apt install linux-perf"; need_cmd curl; need_cmd python3; need_cmd pgrep
EV='task-clock,context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,raw_syscalls:sys_enter'
perline() { # file jobs label jobs_s gen
  grep -q task-clock "$1" || die "perf counted nothing for $3 (perf_event_paranoid <= 1, or root?): $(head -c 400 "$1")"
  awk -v n="$2" -v label="$3" -v tput="$4" -v gen="$5" '
    /task-clock/ {gsub(",","",$1); cpu=$1}
    /context-switches/ {gsub(",","",$1); cs=$1}
    /sys_enter_futex/ {gsub(",","",$1); fu=$1}
    /sys_enter_nanosleep/ {gsub(",","",$1); ns=$1}
    /raw_syscalls:sys_enter/ {gsub(",","",$1); sc=$1}
    END {printf "%-7s %7s jobs/s  cpu %5.0f us/job  futex %.2f  nanosleep %.2f  cs %.2f  (sum %.2f)  syscalls %.1f  gen %s\n", label, tput, cpu*1000/n, fu/n, ns/n, cs/n, (fu+ns+cs)/n, sc/n, gen}' "$1"
}
for i in $(seq 1 "$PAIRS"); do
  d=$(mktemp -d -p "$work") || die "mktemp failed"
  start_server "$d/data" "$d/server.log"
  perf stat -x, -e "$EV" -p $spid -o "$d/perf" &
  ppid=$!; sleep 0.2
  alive $ppid || die "perf stat did not start (perf_event_paranoid <= 1, or root?): $(cat "$d/perf" 2>/dev/null)"
  step "$BIN" bench --server "$addr" --jobs "$JOBS" --json >"$d/bench.json" 2>"$d/bench.err" || die "tether bench failed: $(tail -c 600 "$d/bench.err")"
  kill -INT $ppid; wait $ppid 2>/dev/null
  stop_server $spid
  read -r tput gen < <(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(round(d['jobs_per_second']), round(d.get('generator_cpu_per_job_ns',0)/1000))" "$d/bench.json") ||
    die "tether bench's report is not JSON: $(head -c 400 "$d/bench.json")"
  # perf -x, puts the value first and the event name third
  awk -F, '{print $1, $3}' "$d/perf" >"$d/perf.txt"
  perline "$d/perf.txt" "$JOBS" tether "$tput" "$gen"
  rm -rf "$d"

  d=$(mktemp -d -p "$work") || die "mktemp failed"
  "$FLOOR" --jobs "$JOBS" --dir "$d" >"$d/out" 2>&1 &
  fpid=$!; child=""
  for _ in $(seq 1 2000); do child=$(pgrep -P $fpid 2>/dev/null | head -1); [ -n "$child" ] && break; sleep 0.001; done
  [ -n "$child" ] || die "benchfloor started no --serve child: $(tail -c 600 "$d/out")"
  perf stat -x, -e "$EV" -p "$child" -o "$d/perf" &
  ppid=$!
  wait $fpid || die "benchfloor failed: $(tail -c 600 "$d/out")"
  kill -INT $ppid 2>/dev/null; wait $ppid 2>/dev/null
  awk -F, '{print $1, $3}' "$d/perf" >"$d/perf.txt"
  tput=$(awk '/throughput/{print $2}' "$d/out"); gen=$(awk '/cpu per job/{print $8" (own "$5")"}' "$d/out")
  [ -n "$tput" ] || die "benchfloor printed no throughput: $(tail -c 600 "$d/out")"
  perline "$d/perf.txt" "$JOBS" floor "$tput" "$gen"
  rm -rf "$d"
done
