#!/usr/bin/env bash
# bench/peers/run.sh: toolfleet beside the systems users would pick instead.
#
# Builds DBOS Transact Go (on a local PostgreSQL from Debian's package) and
# the Temporal dev server with the Go SDK, runs the same work on each —
# a durable run doing rounds of 1 and 32 echo calls between two model
# steps, and 8 concurrent runs for the sustained rate — and fleetbench's
# rows of the same shapes, alternating systems for $ROUNDS rounds, then
# prints one table. Opt-in: neither ./test.sh nor CI runs it. See README.md.
#
#   bench/peers/run.sh                    three alternating rounds (about 30 minutes on 2 loaded cores)
#   ROUNDS=1 bench/peers/run.sh           one round
#   SYSTEMS="fleet dbos-fsync-on" bench/peers/run.sh
#
# Environment: ROUNDS (3), SYSTEMS (fleet dbos-fsync-on dbos-fsync-off
# temporal-sqlite-file temporal-in-memory), OUT (bench/peers/results:
# each run's results in a timestamped directory), PEERS_BIN
# (~/.cache/toolfleet-peers/bin: the built binaries, kept between runs),
# TEMPORAL_CLI_VERSION (v1.5.1), DURATION (5s: the sustained window),
# RUNS1 (30), RUNS32 (10): runs of 7 rounds timed per shape,
# FLEETBENCH_ONLY (baseline,single,round,sustained,sync: fleetbench's
# phases; sync adds the journaled rounds on a server that fsyncs every write).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-3}
SYSTEMS=${SYSTEMS:-"fleet dbos-fsync-on dbos-fsync-off temporal-sqlite-file temporal-in-memory"}
PEERS_BIN=${PEERS_BIN:-$HOME/.cache/toolfleet-peers/bin}
TEMPORAL_CLI_VERSION=${TEMPORAL_CLI_VERSION:-v1.5.1}
DURATION=${DURATION:-5s}
RUNS1=${RUNS1:-30}
RUNS32=${RUNS32:-10}
FLEETBENCH_ONLY=${FLEETBENCH_ONLY:-baseline,single,round,sustained,sync}
out=${OUT:-$here/results}/$(date -u +%Y%m%dT%H%M%SZ)
work=$(mktemp -d /tmp/toolfleet-peers.XXXXXX)
chmod 755 "$work" # the postgres user reaches its cluster inside
mkdir -p "$out" "$PEERS_BIN" "$work/warm-up"
log() { printf '== %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- install and build (each step skipped when already done) --------------

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
  log "installing PostgreSQL from Debian's package"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
if [[ " $SYSTEMS " == *" temporal-"* ]] &&
  { [ ! -x "$PEERS_BIN/temporal" ] || [ "$(cat "$PEERS_BIN/temporal.version" 2>/dev/null)" != "$TEMPORAL_CLI_VERSION" ]; }; then
  # v1.9.1's go.mod has a replace directive, which go install refuses; v1.5.1 installs.
  log "building the Temporal CLI $TEMPORAL_CLI_VERSION (its dev server) into $PEERS_BIN"
  (cd "$work" && GOBIN=$PEERS_BIN GOFLAGS= go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_CLI_VERSION")
  echo "$TEMPORAL_CLI_VERSION" >"$PEERS_BIN/temporal.version"
fi
log "building peersbench and fleetbench"
(cd "$here" && go build -o "$PEERS_BIN/peersbench" .)
(cd "$root" && go build -o "$PEERS_BIN/fleetbench" ./cmd/fleetbench)
peersbench=$PEERS_BIN/peersbench

# --- PostgreSQL: a cluster of our own in $work, as the postgres user when root

pgdata=$work/pg/data pgsock=$work/pg pgport=$("$peersbench" freeport)
asdb=()
if [ "$(id -u)" = 0 ]; then asdb=(runuser -u postgres --); fi
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg"
pg_up=
pg_start() { # pg_start EXTRA-SERVER-OPTIONS
  if [ ! -d "$pgdata" ]; then
    "${asdb[@]}" "$pgbin/initdb" -D "$pgdata" -A trust -U postgres >"$work/pg/initdb.log" 2>&1
  fi
  "${asdb[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg/server.log" -w \
    -o "-p $pgport -k $pgsock -c listen_addresses=127.0.0.1 -c max_connections=200 $1" start >/dev/null
  pg_up=1
  "${asdb[@]}" "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U postgres -qAt -c 'DROP DATABASE IF EXISTS peersbench' >/dev/null
  "${asdb[@]}" "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U postgres -qAt -c 'CREATE DATABASE peersbench' >/dev/null
}
pg_stop() {
  [ -n "$pg_up" ] || return 0
  "${asdb[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null || true
  pg_up=
}
pg_pid() { head -1 "$pgdata/postmaster.pid"; }
pg_show() { "${asdb[@]}" "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U postgres -qAt -c "SHOW $1"; }

# --- Temporal: the dev server, its floor removed by dynamic config -----------

# The dev server has one history shard; its transfer queue is polled at most
# history.transferProcessorMaxPollRPS (20) times a second, which puts a
# ~100 ms floor under every activity and workflow task it dispatches. These
# lift that limit and its siblings; the task queues get one partition, so a
# task is matched to a waiting poller without being forwarded.
temporal_dc=(
  history.transferProcessorMaxPollRPS=100000
  history.timerProcessorMaxPollRPS=100000
  history.visibilityProcessorMaxPollRPS=100000
  history.outboundProcessorMaxPollRPS=100000
  matching.numTaskqueueReadPartitions=1
  matching.numTaskqueueWritePartitions=1
)
temporal_pid=
temporal_start() { # temporal_start sqlite-file|in-memory
  local port args=()
  port=$("$peersbench" freeport)
  temporal_addr=127.0.0.1:$port
  for kv in "${temporal_dc[@]}"; do args+=(--dynamic-config-value "$kv"); done
  if [ "$1" = sqlite-file ]; then
    rm -f "$work/temporal.db"*
    args+=(--db-filename "$work/temporal.db")
  fi
  "$PEERS_BIN/temporal" server start-dev --headless --ip 127.0.0.1 --port "$port" \
    --http-port "$("$peersbench" freeport)" --metrics-port "$("$peersbench" freeport)" \
    --log-level error "${args[@]}" >"$work/temporal.log" 2>&1 &
  temporal_pid=$!
  for _ in $(seq 600); do
    if "$PEERS_BIN/temporal" operator cluster health --address "$temporal_addr" >/dev/null 2>&1; then return 0; fi
    kill -0 "$temporal_pid" 2>/dev/null || { cat "$work/temporal.log" >&2; return 1; }
    sleep 0.1
  done
  log "the Temporal dev server did not answer in 60 s"; return 1
}
temporal_stop() {
  [ -n "$temporal_pid" ] || return 0
  kill "$temporal_pid" 2>/dev/null || true
  wait "$temporal_pid" 2>/dev/null || true
  temporal_pid=
}

cleanup() {
  temporal_stop
  pg_stop
  rm -rf "$work"
}
trap cleanup EXIT

# --- one system, one round ----------------------------------------------------

peer_flags=(--runs1 "$RUNS1" --runs32 "$RUNS32" --duration "$DURATION")
fleetbench_flags=()
run_system() { # run_system SYSTEM DIR
  local dir=$2
  case $1 in
  fleet)
    log "fleetbench --only $FLEETBENCH_ONLY --workers 2 ${fleetbench_flags[*]}"
    (cd "$root" && "$PEERS_BIN/fleetbench" --only "$FLEETBENCH_ONLY" --workers 2 "${fleetbench_flags[@]}") >"$dir/fleetbench.txt"
    ;;
  dbos-fsync-on)
    pg_start ""
    log "DBOS, PostgreSQL fsync=$(pg_show fsync) synchronous_commit=$(pg_show synchronous_commit)"
    "$peersbench" dbos --config "fsync on" --url "postgres://postgres@127.0.0.1:$pgport/peersbench?sslmode=disable" \
      --pids "$(pg_pid)" "${peer_flags[@]}" >>"$dir/peers.tsv" || { pg_stop; return 1; }
    pg_stop
    ;;
  dbos-fsync-off)
    pg_start "-c fsync=off -c synchronous_commit=off"
    log "DBOS, PostgreSQL fsync=$(pg_show fsync) synchronous_commit=$(pg_show synchronous_commit)"
    "$peersbench" dbos --config "fsync off" --url "postgres://postgres@127.0.0.1:$pgport/peersbench?sslmode=disable" \
      --pids "$(pg_pid)" "${peer_flags[@]}" >>"$dir/peers.tsv" || { pg_stop; return 1; }
    pg_stop
    ;;
  temporal-sqlite-file | temporal-in-memory)
    local mode=${1#temporal-}
    temporal_start "$mode"
    log "Temporal dev server ($mode)"
    "$peersbench" temporal --config "${mode//-/ }" --address "$temporal_addr" --pids "$temporal_pid" \
      "${peer_flags[@]}" >>"$dir/peers.tsv" || { temporal_stop; return 1; }
    temporal_stop
    ;;
  *) log "unknown system $1"; return 1 ;;
  esac
}

# --- the alternating rounds ---------------------------------------------------

read -r -a systems <<<"$SYSTEMS"
{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version | cut -d' ' -f3-)"
  echo "PostgreSQL: $("$pgbin/postgres" --version)"
  echo "Temporal CLI: $TEMPORAL_CLI_VERSION, $("$PEERS_BIN/temporal" --version)"
  echo "DBOS Transact Go and the Temporal Go SDK: $(cd "$here" && go list -m -f '{{.Path}} {{.Version}}' github.com/dbos-inc/dbos-transact-golang go.temporal.io/sdk | tr '\n' ' ')"
  echo "Temporal dynamic config: ${temporal_dc[*]}"
  echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/machine.txt" >&2
# A short pass of every system first, not recorded: the first system of
# round 1 would otherwise run on a cold machine (binaries and stores not in
# the page cache, the CPU not yet busy) and measure that, not itself.
log "warming up: a short pass of each system, not recorded"
measured_flags=("${peer_flags[@]}")
peer_flags=(--runs1 3 --runs32 1 --duration 1s)
fleetbench_flags=(--short)
for sys in "${systems[@]}"; do
  run_system "$sys" "$work/warm-up" 2>>"$work/warm-up.log" || log "$sys failed while warming up (see $work/warm-up.log); going on"
  temporal_stop
  pg_stop
done
peer_flags=("${measured_flags[@]}")
fleetbench_flags=()
for k in $(seq "$ROUNDS"); do
  dir=$out/round-$k
  mkdir -p "$dir"
  n=${#systems[@]}
  for i in $(seq 0 $((n - 1))); do # each round starts one system later
    sys=${systems[$(((i + k - 1) % n))]}
    run_system "$sys" "$dir" 2> >(tee -a "$dir/log.txt" >&2) || log "$sys failed in round $k (see $dir/log.txt); going on"
    temporal_stop
    pg_stop
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt" >&2
echo
cat "$out/machine.txt"
echo
"$peersbench" table "$out" | tee "$out/table.md"
echo
echo "results in $out"
