# bench-lib.sh: what docs/lifetime.sh, floor-pair.sh and history-pair.sh share, sourced by them:
# clear failures (exit 1 with a message, never lines of zeros), one temp dir for the run, and a
# trap that on EXIT, INT or TERM kills every process the script started (its servers, benches,
# pollers, perf) and removes that dir. start_server reads the address from the server's own
# log, so the server answering is the script's, never another program on a port it meant to use.
set -u -o pipefail

die() { echo "${0##*/}: $*" >&2; exit 1; }
need_exec() { [ -f "$1" ] && [ -x "$1" ] || die "$2 '$1' is not an executable file${3:+ ($3)}"; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || die "needs $1 on PATH${2:+ ($2)}"; }
need_count() { [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || die "$1 is a whole number above 0, not '$2'"; }

work=$(mktemp -d -t tether-bench.XXXXXX) || die "mktemp failed"
cleanup() {
  local pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then
    kill $pids 2>/dev/null
    wait $pids 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# alive PID: the process runs (kill -0 also answers for a child that exited and was not waited for).
alive() { [ -r "/proc/$1/stat" ] && [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) != Z* ]]; }

# start_server DATA LOG [ADDR]: starts $BIN server on ADDR (127.0.0.1:0, a port of its own, if
# none) and returns once it answers /readyz, with spid its pid and addr its address as its log
# says it; fails after 30 s, or if the server exits (an address in use, say).
start_server() {
  local data=$1 log=$2 want=${3:-127.0.0.1:0} deadline=$((SECONDS + 30))
  "$BIN" server --data "$data" --addr "$want" --log-format json --log-level info >"$log" 2>&1 &
  spid=$! addr=""
  until [ -n "$addr" ] && curl -sf -m 2 "http://$addr/readyz" >/dev/null; do
    alive "$spid" || die "the server on $want exited: $(tail -c 600 "$log")"
    [ "$SECONDS" -lt "$deadline" ] || die "the server on $want did not answer /readyz within 30 s: $(tail -c 600 "$log")"
    [ -n "$addr" ] || addr=$(sed -n 's/.*"msg":"listening[^"]*".*"addr":"\([^"]*\)".*/\1/p' "$log" | head -1)
    sleep 0.02
  done
}

# stop_server PID [SIGNAL]: signals the server (TERM) and waits for it.
stop_server() { kill -"${2:-TERM}" "$1" 2>/dev/null; wait "$1" 2>/dev/null; return 0; }

# step CMD...: runs CMD in the background and waits for it, returning its status: bash defers
# its traps while a command runs in the foreground, so a TERM would wait for a whole bench.
step() { "$@" & wait $!; }
