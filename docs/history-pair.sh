#!/usr/bin/env bash
# history-pair.sh: is tether as cheap with history as fresh (issue 55; docs/design.md §8, §14)?
#   bash docs/history-pair.sh [TETHER_BIN [FILL [ROUNDS [JOBS]]]]
# One server is filled with FILL retained jobs (`tether bench --burn-down`); then, ROUNDS times,
# `tether bench --jobs JOBS` runs on it and on a fresh server in turn, and each run prints its
# server's CPU a job (perf stat task-clock), bytes written to disk a job (/proc/PID/io) and
# Pebble's compaction, flush, ingest and WAL bytes a job (the tether_pebble_* metrics). Needs
# perf (root or perf_event_paranoid <= 1), curl and python3.
set -u
BIN=${1:-bin/tether}; FILL=${2:-300000}; ROUNDS=${3:-3}; JOBS=${4:-20000}
start() { # dir -> sets spid port
  port=$((20000 + RANDOM % 20000))
  "$BIN" server --data "$1/data" --addr 127.0.0.1:$port >"$1/server.log" 2>&1 &
  spid=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
}
pm() { curl -s "http://127.0.0.1:$1/metrics" | awk '
  /^tether_pebble_compaction_bytes_written_total/ {c+=$2}
  /^tether_pebble_flush_bytes_total/ {f+=$2}
  /^tether_pebble_ingested_bytes_total/ {i+=$2}
  /^tether_pebble_wal_bytes_written_total/ {w+=$2}
  END {printf "%d %d %d %d\n", c, f, i, w}'; }
io() { awk '/^wchar/{w=$2} /^write_bytes/{b=$2} END{print w, b}' /proc/$1/io; }
run() { # label spid port
  local label=$1 pid=$2 p=$3 d
  d=$(mktemp -d)
  read c0 f0 i0 w0 < <(pm $p); read wc0 wb0 < <(io $pid)
  perf stat -x, -e task-clock -p $pid -o "$d/perf" & local ppid=$!; sleep 0.2
  "$BIN" bench --server 127.0.0.1:$p --jobs "$JOBS" --json >"$d/bench.json" 2>"$d/bench.err"
  kill -INT $ppid; wait $ppid 2>/dev/null
  sleep 1 # let the run's compactions show
  read c1 f1 i1 w1 < <(pm $p); read wc1 wb1 < <(io $pid)
  cpu=$(awk -F, '/task-clock/{print $1}' "$d/perf")
  tput=$(python3 -c "import json;print(round(json.load(open('$d/bench.json'))['jobs_per_second']))" 2>/dev/null)
  awk -v l=$label -v n=$JOBS -v cpu=$cpu -v t=$tput -v c=$((c1-c0)) -v f=$((f1-f0)) -v i=$((i1-i0)) -v w=$((w1-w0)) -v wc=$((wc1-wc0)) -v wb=$((wb1-wb0)) 'BEGIN{
    printf "%-8s %6s jobs/s cpu %4.0f us/job  disk-write %5.0f B/job  wchar %5.0f B/job  pebble: compact %5.0f flush %5.0f ingest %5.0f wal %5.0f B/job\n", l, t, cpu*1000/n, wb/n, wc/n, c/n, f/n, i/n, w/n}'
  rm -rf "$d"
}
H=$(mktemp -d); start $H; hpid=$spid; hport=$port
t0=$(date +%s)
"$BIN" bench --server 127.0.0.1:$hport --burn-down "$FILL" --workers 50 --capacity 4 --json >"$H/fill.json" 2>"$H/fill.err"
echo "filled $FILL in $(( $(date +%s) - t0 )) s: $(python3 -c "import json;d=json.load(open('$H/fill.json'));print(round(d['jobs_per_second']),'jobs/s')" 2>/dev/null) $(du -sh $H/data | cut -f1)"
for r in $(seq 1 "$ROUNDS"); do
  run history $hpid $hport
  F=$(mktemp -d); start $F; run fresh $spid $port; kill $spid; wait $spid 2>/dev/null; rm -rf $F
done
kill $hpid; wait $hpid 2>/dev/null; rm -rf $H
