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
set -u
BIN=${1:-bin/tether}; JOBS=${2:-20000}; PAIRS=${3:-3}; FLOOR=${4:-bin/benchfloor}
EV='task-clock,context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,raw_syscalls:sys_enter'
perline() { # file jobs label jobs_s gen
  awk -v n="$2" -v label="$3" -v tput="$4" -v gen="$5" '
    /task-clock/ {gsub(",","",$1); cpu=$1}
    /context-switches/ {gsub(",","",$1); cs=$1}
    /sys_enter_futex/ {gsub(",","",$1); fu=$1}
    /sys_enter_nanosleep/ {gsub(",","",$1); ns=$1}
    /raw_syscalls:sys_enter/ {gsub(",","",$1); sc=$1}
    END {printf "%-7s %7s jobs/s  cpu %5.0f us/job  futex %.2f  nanosleep %.2f  cs %.2f  (sum %.2f)  syscalls %.1f  gen %s\n", label, tput, cpu*1000/n, fu/n, ns/n, cs/n, (fu+ns+cs)/n, sc/n, gen}' "$1"
}
for i in $(seq 1 "$PAIRS"); do
  d=$(mktemp -d); port=$((20000 + RANDOM % 20000))
  "$BIN" server --data "$d/data" --addr 127.0.0.1:$port >"$d/server.log" 2>&1 &
  spid=$!
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.05; done
  perf stat -x, -e "$EV" -p $spid -o "$d/perf" &
  ppid=$!; sleep 0.2
  "$BIN" bench --server 127.0.0.1:$port --jobs "$JOBS" --json >"$d/bench.json" 2>"$d/bench.err"
  kill -INT $ppid; wait $ppid 2>/dev/null
  kill $spid; wait $spid 2>/dev/null
  tput=$(python3 -c "import json,sys;d=json.load(open('$d/bench.json'));print(round(d['jobs_per_second']))" 2>/dev/null)
  gen=$(python3 -c "import json;d=json.load(open('$d/bench.json'));print(round(d.get('generator_cpu_per_job_ns',0)/1000))" 2>/dev/null)
  # perf -x, puts the value first and the event name third
  awk -F, '{print $1, $3}' "$d/perf" >"$d/perf.txt"
  perline "$d/perf.txt" "$JOBS" tether "$tput" "$gen"
  rm -rf "$d"

  d=$(mktemp -d)
  "$FLOOR" --jobs "$JOBS" --dir "$d" >"$d/out" 2>&1 &
  fpid=$!; child=""
  for _ in $(seq 1 2000); do child=$(pgrep -P $fpid 2>/dev/null | head -1); [ -n "$child" ] && break; sleep 0.001; done
  perf stat -x, -e "$EV" -p "$child" -o "$d/perf" &
  ppid=$!
  wait $fpid; kill -INT $ppid 2>/dev/null; wait $ppid 2>/dev/null
  awk -F, '{print $1, $3}' "$d/perf" >"$d/perf.txt"
  tput=$(awk '/throughput/{print $2}' "$d/out"); gen=$(awk '/cpu per job/{print $8" (own "$5")"}' "$d/out")
  perline "$d/perf.txt" "$JOBS" floor "$tput" "$gen"
  rm -rf "$d"
done
