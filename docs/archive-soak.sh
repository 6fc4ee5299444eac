#!/usr/bin/env bash
# archive-soak.sh: the figures of the README's "What it costs" under archive segments, on this
# machine. For each ARCHIVE_AFTER in turn (default "1m 0": with archiving, then without), a
# server on a fresh data dir with --retain 1m, a saturated `tether bench --jobs JOBS` (600000),
# and the data dir sampled every 10 s: the Pebble part (du without archive/), its WAL and
# tables, the archive, the head seq. Prints jobs/s and the Pebble peak of each run, then
# `tether replay verify` of the last archived one with its time. PAIRS (1) repeats the
# alternation. About 2 minutes a run and 1 GB of disk a run. BIN (bin/tether) and ADDR
# (127.0.0.1:18181) choose the binary and address; OUT (a temporary dir) keeps the runs.
set -u
BIN=${BIN:-bin/tether}; A=${ADDR:-127.0.0.1:18181}; JOBS=${JOBS:-600000}; OUT=${OUT:-$(mktemp -d)}
verify_dir=""
for pair in $(seq 1 "${PAIRS:-1}"); do
  for after in ${ARCHIVE_AFTER:-1m 0}; do
    d=$OUT/run$pair-after$after; mkdir -p $d
    $BIN server --data $d/data --addr $A --log-level warn --retain 1m --archive-after $after >$d/server.log 2>&1 & pid=$!
    until curl -sf http://$A/readyz >/dev/null; do sleep 0.1; done
    ( start=$(date +%s); while kill -0 $pid 2>/dev/null; do
        wal=$(cat $d/data/*.log 2>/dev/null | wc -c); sst=$(cat $d/data/*.sst 2>/dev/null | wc -c)
        tot=$(du -sb --exclude=archive $d/data | cut -f1); arch=$(du -sb $d/data/archive 2>/dev/null | cut -f1)
        head=$(curl -s http://$A/metrics | awk '/^tether_log_head_seq /{print $2}')
        echo "$(( $(date +%s)-start ))s pebble=$((tot>>20))MiB wal=$((wal>>20)) sst=$((sst>>20)) archive=$((${arch:-0}>>20)) head=$head"
        sleep 10; done ) >$d/disk.log & mon=$!
    $BIN bench --server $A --jobs $JOBS --json >$d/bench.json 2>$d/bench.err
    sleep 12 # a look of the archiver after the load
    kill -TERM $pid; wait $pid; kill $mon 2>/dev/null; wait $mon 2>/dev/null
    peak=$(sed -n 's/.* pebble=\([0-9]*\)MiB.*/\1/p' $d/disk.log | sort -n | tail -1)
    python3 -c "import json; r=json.load(open('$d/bench.json')); print('pair $pair --archive-after $after: %.0f jobs/s, %d errors, Pebble peak ${peak} MiB' % (r['jobs_per_second'], r['errors']))"
    [ "$after" != 0 ] && verify_dir=$d/data
  done
done
echo "runs kept in $OUT (disk.log: the samples)"
if [ -n "$verify_dir" ]; then
  /usr/bin/time -f "replay verify took %e s, peak RSS %M KB" $BIN replay verify --data $verify_dir | head -3
fi
