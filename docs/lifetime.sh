#!/usr/bin/env bash
# lifetime.sh: the figures of the README's "A lifetime of jobs", on this machine. One server and
# one fresh data dir: tether bench --fill 100000 (its report), --fill 900000 more (its report),
# a paced run at 500/s twice while a client polls the newest-first list every 0.5 s, SIGTERM,
# a start, 30,000 more jobs and kill -9, a start; each start timed to /readyz. 5–10 minutes
# and about 0.6 GB of disk. BIN (bin/tether) chooses the binary; ADDR, if set, the address
# (else the server takes a free port of its own). Any step that fails stops the script with a
# message and exit 1; the server, the poller and the temp dir go with it.
. "$(dirname "$0")/bench-lib.sh"
BIN=${BIN:-bin/tether}; A=${ADDR:-127.0.0.1:0}
need_exec "$BIN" BIN "go build -o bin/tether ./cmd/tether"
need_cmd curl; need_cmd python3; need_cmd bc
d=$work/data
start_server "$d" "$work/server.log" "$A"; pid=$spid
fill() { # jobs
  step "$BIN" bench --server "$addr" --fill "$1" >"$work/fill.out" 2>"$work/bench.err" || die "tether bench --fill $1 failed: $(tail -c 600 "$work/bench.err")"
  tail -13 "$work/fill.out"
}
echo "== after 100,000"; fill 100000
echo "== after 1,000,000"; fill 900000
( while true; do curl -s -m 5 -o /dev/null "http://$addr/v1/jobs?limit=50&order=newest"; sleep 0.5; done ) & poller=$!
for i in 1 2; do
  step "$BIN" bench --server "$addr" --rate 500 --duration 5s --json >"$work/paced.json" 2>"$work/bench.err" || die "tether bench --rate 500 failed: $(tail -c 600 "$work/bench.err")"
  python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); s=r['submit_to_start_latency']
print('paced 500/s with a poller: submit->start p50 %.2f ms p99 %.2f ms max %.2f ms' % (s['p50_ns']/1e6, s['p99_ns']/1e6, s['max_ns']/1e6))" "$work/paced.json" || die "no submit->start latency in the paced run's report"
done
kill $poller; wait $poller 2>/dev/null
echo "RSS now: $(grep VmRSS /proc/$pid/status)"
t0=$(date +%s.%N); kill -TERM $pid; wait $pid; rc=$?; t1=$(date +%s.%N)
[ $rc -eq 0 ] || die "the server exited $rc on SIGTERM: $(tail -c 600 "$work/server.log")"
echo "SIGTERM -> exit: $(echo "$t1 - $t0" | bc) s"
t0=$(date +%s.%N); start_server "$d" "$work/server2.log" "$A"; pid=$spid; t1=$(date +%s.%N)
echo "start after SIGTERM -> /readyz: $(echo "$t1 - $t0" | bc) s"
step "$BIN" bench --server "$addr" --jobs 30000 --json >/dev/null 2>"$work/bench.err" || die "tether bench --jobs 30000 failed: $(tail -c 600 "$work/bench.err")"
stop_server $pid KILL
t0=$(date +%s.%N); start_server "$d" "$work/server3.log" "$A"; pid=$spid; t1=$(date +%s.%N)
echo "kill -9 after 30,000 more jobs, start -> /readyz: $(echo "$t1 - $t0" | bc) s; $(grep -o '"replayed":[0-9]*' "$work/server3.log")"
echo "RSS after start: $(grep VmRSS /proc/$pid/status)"
kill -TERM $pid; wait $pid || die "the server exited $? on SIGTERM"
echo "data dir: $(du -sh "$d" | cut -f1)"
