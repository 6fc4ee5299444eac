#!/usr/bin/env bash
# lifetime.sh: the figures of the README's "A lifetime of jobs", on this machine. One server and
# one fresh data dir: tether bench --fill 100000 (its report), --fill 900000 more (its report),
# a paced run at 500/s twice while a client polls the newest-first list every 0.5 s, SIGTERM,
# a start, 30,000 more jobs and kill -9, a start; each start timed to /readyz. About 5 minutes
# and 1.2 GB of disk. BIN (bin/tether) and ADDR (127.0.0.1:18201) choose the binary and address.
set -u
d=$(mktemp -d); A=${ADDR:-127.0.0.1:18201}; BIN=${BIN:-bin/tether}
$BIN server --data $d --addr $A --log-level error & pid=$!
until curl -sf http://$A/readyz >/dev/null; do sleep 0.1; done
echo "== after 100,000"; $BIN bench --server $A --fill 100000 2>/dev/null | tail -13
echo "== after 1,000,000"; $BIN bench --server $A --fill 900000 2>/dev/null | tail -13
( while true; do curl -s -o /dev/null "http://$A/v1/jobs?limit=50&order=newest"; sleep 0.5; done ) & poller=$!
for i in 1 2; do
$BIN bench --server $A --rate 500 --duration 5s --json 2>/dev/null | python3 -c "
import json,sys; r=json.load(sys.stdin); s=r['submit_to_start_latency']
print('paced 500/s with a poller: submit->start p50 %.2f ms p99 %.2f ms max %.2f ms' % (s['p50_ns']/1e6, s['p99_ns']/1e6, s['max_ns']/1e6))"
done
kill $poller
echo "RSS now: $(grep VmRSS /proc/$pid/status)"
t0=$(date +%s.%N); kill -TERM $pid; wait $pid; t1=$(date +%s.%N)
echo "SIGTERM -> exit: $(echo "$t1 - $t0" | bc) s"
t0=$(date +%s.%N); $BIN server --data $d --addr $A --log-level error & pid=$!
until curl -sf http://$A/readyz >/dev/null; do sleep 0.02; done; t1=$(date +%s.%N)
echo "start after SIGTERM -> /readyz: $(echo "$t1 - $t0" | bc) s"
$BIN bench --server $A --jobs 30000 --json >/dev/null 2>&1
kill -9 $pid; wait $pid 2>/dev/null
t0=$(date +%s.%N); $BIN server --data $d --addr $A --log-level info 2>"$d.start.log" & pid=$!
until curl -sf http://$A/readyz >/dev/null; do sleep 0.02; done; t1=$(date +%s.%N)
echo "kill -9 after 30,000 more jobs, start -> /readyz: $(echo "$t1 - $t0" | bc) s; $(grep -o '"replayed":[0-9]*' "$d.start.log")"
echo "RSS after start: $(grep VmRSS /proc/$pid/status)"
kill -TERM $pid; wait $pid
echo "data dir: $(du -sh $d | cut -f1)"
rm -rf "$d" "$d.start.log"
