#!/usr/bin/env bash
# lister.sh: the figures of the README's "A list beside the acknowledgements". A data dir with
# 500,000 finished jobs (made once by `tether bench --fill 500000`, or DATA=dir of one and
# QUEUE=its bench queue); for each binary given (bin/tether), the time of four filtered lists
# alone, by status and queue: the history's queue, one with no job, and no failed or cancelled
# one (after 3,000 more jobs, which memory holds; 300 requests or 10 s each). Then, PAIRS times
# (2), for each binary in turn: a paced `tether bench --rate 500 --duration 10s` without, then
# with, a client that asks for those lists in a loop on one keep-alive connection; CONTROL=1
# adds a run beside the same loop on /healthz, which takes no lock: what a client looping as fast
# as it can costs the machine. Each run prints the submit->ack (the durable answer) latency.
# ADDR (127.0.0.1:18202) chooses the address. About 2 minutes a pair, plus 3 for the fill.
set -u
A=${ADDR:-127.0.0.1:18202}; PAIRS=${PAIRS:-2}
bins=("$@"); [ ${#bins[@]} -eq 0 ] && bins=(bin/tether)
d=${DATA:-}; Q=${QUEUE:-}
if [ -z "$d" ]; then
  d=$(mktemp -d)
  ${bins[0]} server --data $d --addr $A --log-level error & pid=$!
  until curl -sf http://$A/readyz >/dev/null; do sleep 0.1; done
  Q=$(${bins[0]} bench --server $A --fill 500000 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['queue'])")
  kill -TERM $pid; wait $pid
  echo "history: 500,000 jobs in $d, queue $Q"
fi
lister='
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
c, i = http.client.HTTPConnection(host, int(port), timeout=300), 0
while True:
    c.request("GET", sys.argv[2 + i % (len(sys.argv) - 2)]); c.getresponse().read(); i += 1'
filters=("/v1/jobs?status=succeeded&queue=$Q&limit=50" "/v1/jobs?status=succeeded&queue=elsewhere&limit=50" "/v1/jobs?status=failed&queue=$Q&limit=50" "/v1/jobs?status=cancelled&queue=$Q&limit=50&order=newest")
run() { # binary, off|on|healthz
  $1 server --data $d --addr $A --log-level error & local pid=$! lp=
  until curl -sf http://$A/readyz >/dev/null; do sleep 0.1; done
  case $2 in
    on) python3 -c "$lister" $A "${filters[@]}" & lp=$!; sleep 1 ;;
    healthz) python3 -c "$lister" $A /healthz & lp=$!; sleep 1 ;;
  esac
  $1 bench --server $A --rate 500 --duration 10s --json >$d.json 2>$d.err
  python3 -c "
import json,sys
try: s=json.load(open(sys.argv[3]))['submit_latency']
except ValueError: print('%-20s lister %-7s  the run failed: %s' % (sys.argv[1], sys.argv[2], open(sys.argv[4]).read().strip().splitlines()[-1:])); sys.exit()
print('%-20s lister %-7s  submit->ack p50 %7.2f ms  p99 %8.2f ms  max %8.2f ms' % (sys.argv[1], sys.argv[2], s['p50_ns']/1e6, s['p99_ns']/1e6, s['max_ns']/1e6))" "$1" $2 $d.json $d.err
  rm -f $d.json $d.err
  [ -n "$lp" ] && kill $lp
  kill -TERM $pid; wait $pid
}
timing='
import http.client, sys, time
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=300)
for path in sys.argv[2:]:
    t, n = time.perf_counter(), 0
    while n < 300 and time.perf_counter() - t < 10:
        c.request("GET", path); c.getresponse().read(); n += 1
    print("%8.2f ms a request (%3d)  %s" % ((time.perf_counter() - t) / n * 1e3, n, path))'
times() { # binary: each filter's time, alone (300 requests or 10 s), with 3,000 jobs in memory
  $1 server --data $d --addr $A --log-level error & local pid=$!
  until curl -sf http://$A/readyz >/dev/null; do sleep 0.1; done
  $1 bench --server $A --jobs 3000 --json >/dev/null 2>&1
  python3 -c "$timing" $A "${filters[@]}" | sed "s|^|$(printf '%-20s' $1) |"
  kill -TERM $pid; wait $pid
}
for b in "${bins[@]}"; do times $b; done
for p in $(seq $PAIRS); do for b in "${bins[@]}"; do
  run $b off; run $b on; [ -n "${CONTROL:-}" ] && run $b healthz
done; done
[ -z "${DATA:-}" ] && rm -rf "$d"
