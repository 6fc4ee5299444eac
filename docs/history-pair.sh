#!/usr/bin/env bash
# history-pair.sh: is tether as cheap with history as fresh (issue 55; docs/design.md §8, §14)?
#   bash docs/history-pair.sh [TETHER_BIN [FILL [ROUNDS [JOBS]]]]
# One server is filled with FILL retained jobs (`tether bench --burn-down`); then, ROUNDS times,
# `tether bench --jobs JOBS` runs on it and on a fresh server in turn, and each run prints its
# server's CPU a job (perf stat task-clock), bytes written to disk a job (/proc/PID/io) and
# Pebble's compaction, flush, ingest and WAL bytes a job (the tether_pebble_* metrics). Needs
# perf (root or perf_event_paranoid <= 1), curl and python3.
# A missing binary, perf or curl, a FILL, ROUNDS or JOBS that is not a whole number above 0, or
# a step that fails stops it with a message and exit 1; the trap kills what it started.
. "$(dirname "$0")/bench-lib.sh"
BIN=${1:-bin/tether}; FILL=${2:-300000}; ROUNDS=${3:-3}; JOBS=${4:-20000}
need_exec "$BIN" TETHER_BIN "go build -o bin/tether ./cmd/tether"
need_count FILL "$FILL"; need_count ROUNDS "$ROUNDS"; need_count JOBS "$JOBS"
need_cmd perf "apt install linux-perf"; need_cmd curl; need_cmd python3
pm() { curl -sf -m 30 "http://$1/metrics" | awk '
  /^tether_pebble_compaction_bytes_written_total/ {c+=$2}
  /^tether_pebble_flush_bytes_total/ {f+=$2}
  /^tether_pebble_ingested_bytes_total/ {i+=$2}
  /^tether_pebble_wal_bytes_written_total/ {w+=$2}
  END {printf "%d %d %d %d\n", c, f, i, w}'; }
io() { awk '/^wchar/{w=$2} /^write_bytes/{b=$2} END{print w, b}' /proc/$1/io; }
measure() { # label spid addr
  local label=$1 pid=$2 a=$3 d c0 f0 i0 w0 wc0 wb0 c1 f1 i1 w1 wc1 wb1 cpu tput
  d=$(mktemp -d -p "$work") || die "mktemp failed"
  read -r c0 f0 i0 w0 < <(pm $a) || die "the $label server's /metrics did not answer"
  read -r wc0 wb0 < <(io $pid) || die "no /proc/$pid/io"
  perf stat -x, -e task-clock -p $pid -o "$d/perf" & local ppid=$!; sleep 0.2
  alive $ppid || die "perf stat did not start (perf_event_paranoid <= 1, or root?): $(cat "$d/perf" 2>/dev/null)"
  step "$BIN" bench --server "$a" --jobs "$JOBS" --json >"$d/bench.json" 2>"$d/bench.err" || die "tether bench on the $label server failed: $(tail -c 600 "$d/bench.err")"
  kill -INT $ppid; wait $ppid 2>/dev/null
  sleep 1 # let the run's compactions show
  read -r c1 f1 i1 w1 < <(pm $a) || die "the $label server's /metrics did not answer"
  read -r wc1 wb1 < <(io $pid) || die "no /proc/$pid/io"
  cpu=$(awk -F, '/task-clock/{print $1}' "$d/perf")
  [ -n "$cpu" ] || die "perf counted nothing: $(head -c 400 "$d/perf")"
  tput=$(python3 -c "import json,sys;print(round(json.load(open(sys.argv[1]))['jobs_per_second']))" "$d/bench.json") || die "tether bench's report is not JSON"
  awk -v l=$label -v n=$JOBS -v cpu=$cpu -v t=$tput -v c=$((c1-c0)) -v f=$((f1-f0)) -v i=$((i1-i0)) -v w=$((w1-w0)) -v wc=$((wc1-wc0)) -v wb=$((wb1-wb0)) 'BEGIN{
    printf "%-8s %6s jobs/s cpu %4.0f us/job  disk-write %5.0f B/job  wchar %5.0f B/job  pebble: compact %5.0f flush %5.0f ingest %5.0f wal %5.0f B/job\n", l, t, cpu*1000/n, wb/n, wc/n, c/n, f/n, i/n, w/n}'
  rm -rf "$d"
}
H=$work/history; mkdir -p "$H"; start_server "$H/data" "$H/server.log"; hpid=$spid; haddr=$addr
t0=$(date +%s)
step "$BIN" bench --server "$haddr" --burn-down "$FILL" --workers 50 --capacity 4 --json >"$H/fill.json" 2>"$H/fill.err" || die "the fill failed: $(tail -c 600 "$H/fill.err")"
echo "filled $FILL in $(( $(date +%s) - t0 )) s: $(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(round(d['jobs_per_second']),'jobs/s')" "$H/fill.json") $(du -sh $H/data | cut -f1)"
for r in $(seq 1 "$ROUNDS"); do
  measure history $hpid $haddr
  F=$(mktemp -d -p "$work") || die "mktemp failed"
  start_server "$F/data" "$F/server.log"; measure fresh $spid $addr; stop_server $spid; rm -rf "$F"
done
stop_server $hpid
