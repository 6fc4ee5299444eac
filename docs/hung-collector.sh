#!/usr/bin/env bash
# hung-collector.sh: the stop times of the README's "Traces" (under Operating tether): SIGTERM to
# exit of tether server, tether worker and a Python worker whose OTLP collector takes the
# connection and the POST and never answers, and of each without tracing. The server stops after
# `tether bench --jobs 3000` (15,000 spans), each worker after 20 traced jobs; the server's
# tether_trace_* figures are printed before its stop, a worker's TRACE_SPANS_LOST line after it.
# BIN (bin/tether) chooses the binary, SDK (sdk/python) the Python SDK, PYTHON (/usr/bin/python3)
# the Python.
set -u
BIN=${BIN:-bin/tether}; SDK=${SDK:-sdk/python}; PY=${PYTHON:-/usr/bin/python3}
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
d=$(mktemp -d)
# The collector: takes every connection and reads it, never writes a byte.
python3 -c '
import socket, sys, threading
ln = socket.socket(); ln.bind(("127.0.0.1", 0)); ln.listen(128)
print(ln.getsockname()[1], flush=True)
def drain(c):
    while c.recv(65536): pass
while True:
    c, _ = ln.accept(); threading.Thread(target=drain, args=(c,), daemon=True).start()
' >"$d/port" & hung=$!
until [ -s "$d/port" ]; do sleep 0.05; done
collector=http://127.0.0.1:$(cat "$d/port")

# server DIR [FLAGS...]: starts a server on a data dir in $d, sets pid and url.
server() {
	"$BIN" server --data "$d/$1" --addr 127.0.0.1:0 --log-format json "${@:2}" 2>"$d/$1.log" & pid=$!
	until grep -q '"msg":"ready"' "$d/$1.log" 2>/dev/null; do sleep 0.05; done
	url=http://$(grep -o '"addr":"[^"]*"' "$d/$1.log" | head -1 | cut -d'"' -f4)
}
# stop PID WHAT: SIGTERM, and the time to exit.
stop() {
	local t0 t1; t0=$(date +%s.%N); kill -TERM "$1"; wait "$1"; t1=$(date +%s.%N)
	echo "$2: SIGTERM -> exit $(echo "$t1 - $t0" | bc) s"
}
# jobs URL: submits 20 traced jobs and waits until they have succeeded.
jobs() {
	for _ in $(seq 20); do TRACEPARENT=$TP "$BIN" job submit --server "$1" --type t --quiet >/dev/null; done
	until [ "$(curl -s "$1/v1/jobs?status=succeeded&limit=100" | grep -o '"id"' | wc -l)" -ge 20 ]; do sleep 0.1; done
	sleep 1 # the worker's first export is under way, and hangs
}

for traced in yes no; do
	flags=(); [ $traced = yes ] && flags=(--otel-endpoint "$collector")
	server s-$traced "${flags[@]}"
	"$BIN" bench --server "$url" --jobs 3000 --json >/dev/null 2>&1
	[ $traced = yes ] && curl -s "$url/metrics" | grep '^tether_trace'
	stop $pid "tether server, traced: $traced"

	server w-$traced
	s=$pid
	OTEL_BSP_SCHEDULE_DELAY=100 "$BIN" worker --server "$url" --state-dir "$d/state-$traced" --log-format json "${flags[@]}" -- true \
		2>"$d/worker-$traced.log" & w=$!
	jobs "$url"
	stop $w "tether worker, traced: $traced"
	grep -o '"code":"TRACE_SPANS_LOST".*' "$d/worker-$traced.log"

	OTEL_BSP_SCHEDULE_DELAY=100 PYTHONPATH=$SDK "$PY" -c '
import logging, sys, tether
logging.basicConfig(level=logging.WARNING)
w = tether.Worker(sys.argv[1], otel_endpoint=sys.argv[2])
w.handle("t", lambda ctx: {})
w.run()
' "$url" "$([ $traced = yes ] && echo "$collector")" 2>"$d/python-$traced.log" & p=$!
	jobs "$url"
	stop $p "Python worker, traced: $traced"
	grep 'spans were not exported' "$d/python-$traced.log"
	kill $s; wait $s
done
kill $hung; wait $hung 2>/dev/null
rm -rf "$d"
