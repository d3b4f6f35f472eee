#!/usr/bin/env bash
# Scale benchmark (`make bench-scale`) on its own local kwok cluster: PODS matched pods on NODES
# kwok nodes, SIDECARSETS SidecarSets of which HELD are paused or held by a partition. Reports
# (never asserts) operator RSS, steady-state CPU and reconciles per minute, status convergence
# after a pod becomes ready, the rollout rate of an image change at maxUnavailable 10% against a
# bare client's pod-patch rate, and admission rate/p50/p99 with wrk over keep-alive TLS (idle and
# with a rollout running) and with the in-process harness (crates/operator/benches/webhook_load.rs). The phases
# are in crates/e2e/examples/scale_bench.rs. Prints a table with the goal next to each figure, keeps it in
# $SSO_WORK/bench-scale-report.txt, and removes the cluster, the operator and wrk on exit.
#
#   make bench-scale                                   # the issue's figures (20000 pods, ...)
#   PODS=2000 SIDECARSETS=100 HELD=10 ROLLOUT_PODS=500 IDLE_SECONDS=60 hack/bench-scale.sh
#
# Knobs (env, defaults in brackets):
#   PODS [20000]  NODES [100]  SIDECARSETS [1000]  HELD [100]  ROLLOUT_PODS [2000] (pods of the
#   SidecarSet whose image changes)  CREATE_CONCURRENCY [64]  PATCH_CONCURRENCY [16] (bare client;
#   the operator upgrades 16 pods at a time)  IDLE_SECONDS [600] (steady-state window:
#   ten minutes with nothing changing)
#   SETTLE_SECONDS [15]  CONVERGE_SAMPLES [5]  POD_DELAY [0s] (kwok's per-pod container restart
#   and ready delays; hack/kwok-stages.yaml's defaults are 100ms and 1.5s)
#   WRK_SECONDS [20]  WRK_CONNECTIONS [8]  WRK_THREADS [2]  HARNESS_REQUESTS [5000] (per
#   connection of the in-process harness; 0 skips it)  NO_WRK=1 (skip wrk)
#   PERF=1 (record the operator with perf during the run; prints the hottest symbols)
#   TIMEOUT_SECONDS [600] (each waiting phase; a phase that times out is reported as such and
#   the run goes on)
#   SSO_WORK [/tmp/sidecarset-bench-scale]  SSO_CLUSTER_NAME [sidecarset-bench-scale]
#   SSO_PORT [9643] (webhook)  SSO_METRICS_PORT [9691]  SSO_APISERVER_EXTRA_ARGS (added to the
#   raised request limits below)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"

log() { printf '[bench-scale] %s\n' "$*" >&2; }
die() { printf '[bench-scale] error: %s\n' "$*" >&2; exit 1; }

export SSO_WORK=${SSO_WORK:-/tmp/sidecarset-bench-scale}
export SSO_CLUSTER_NAME=${SSO_CLUSTER_NAME:-sidecarset-bench-scale}
export SSO_PORT=${SSO_PORT:-9643}
export SSO_METRICS_PORT=${SSO_METRICS_PORT:-9691}
export SSO_TIMEOUT=${SSO_TIMEOUT:-300}
export PODS=${PODS:-20000} SIDECARSETS=${SIDECARSETS:-1000} HELD=${HELD:-100}
NODES=${NODES:-100}
export ROLLOUT_PODS=${ROLLOUT_PODS:-2000}
HARNESS_REQUESTS=${HARNESS_REQUESTS:-5000}

for v in PODS NODES SIDECARSETS HELD ROLLOUT_PODS HARNESS_REQUESTS SSO_PORT SSO_METRICS_PORT; do
  case ${!v} in '' | *[!0-9]*) die "$v='${!v}' must be a whole number" ;; esac
done
[ "$NODES" -gt 0 ] || die "NODES=0: at least one kwok node is needed"
[ "$SIDECARSETS" -ge 3 ] || die "SIDECARSETS=$SIDECARSETS: at least 3 (bench-mesh, bench-log, one per-app set)"
[ "$HELD" -lt $((SIDECARSETS - 2)) ] || die "HELD=$HELD must be below SIDECARSETS-2=$((SIDECARSETS - 2))"
export SSO_NODES=$NODES
# Room for the load: more requests in flight than the API server's defaults (400/200).
export SSO_APISERVER_EXTRA_ARGS="max-requests-inflight=1600 max-mutating-requests-inflight=800${SSO_APISERVER_EXTRA_ARGS:+ $SSO_APISERVER_EXTRA_ARGS}"
mkdir -p "$SSO_WORK"
SSO_WORK=$(cd "$SSO_WORK" && pwd)
REPORT=$SSO_WORK/bench-scale-report.txt
BENCH_PID=
PERF_PID=

stop_pid() { # PID: SIGTERM, then SIGKILL after 5 s
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$BENCH_PID" ] && stop_pid "$BENCH_PID"
  if [ -f "$SSO_WORK/wrk.pid" ]; then stop_pid "$(cat "$SSO_WORK/wrk.pid")"; rm -f "$SSO_WORK/wrk.pid"; fi
  if [ -n "$PERF_PID" ] && kill -0 "$PERF_PID" 2>/dev/null; then
    kill -INT "$PERF_PID" 2>/dev/null || true
    wait "$PERF_PID" 2>/dev/null || true
    log "perf: hottest symbols of the operator (perf report, $SSO_WORK/perf.data)"
    perf report -i "$SSO_WORK/perf.data" --stdio --no-children --sort symbol 2>/dev/null \
      | grep -E '^ +[0-9]' | head -n 25 || true
  fi
  if [ -f "$SSO_WORK/operator.pid" ]; then
    stop_pid "$(cat "$SSO_WORK/operator.pid")"
    rm -f "$SSO_WORK/operator.pid"
  fi
  hack/cluster.sh down || true
  [ "$rc" = 0 ] || log "failed (exit $rc); operator log: $SSO_WORK/operator.log"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

phase_start=$SECONDS
phase() { log "[$((SECONDS - phase_start)) s] $*"; }

# wrk from the distribution's packages.
WRK=
if [ "${NO_WRK:-0}" != 1 ]; then
  if ! WRK=$(command -v wrk); then
    phase "installing wrk (apt-get)"
    SUDO=; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    if ! { $SUDO apt-get install -y --no-install-recommends wrk >"$SSO_WORK/apt.log" 2>&1 \
        || { $SUDO apt-get update >>"$SSO_WORK/apt.log" 2>&1 \
             && $SUDO apt-get install -y --no-install-recommends wrk >>"$SSO_WORK/apt.log" 2>&1; }; }; then
      log "warning: could not install wrk (see $SSO_WORK/apt.log); the wrk figures are skipped"
    fi
    WRK=$(command -v wrk || true)
  fi
fi

phase "building the operator, the benchmark and the in-process harness (release)"
cargo build --release --bin sidecarset-operator
cargo build --release -p sidecarset-e2e --example scale_bench
HARNESS_LINE=
if [ "$HARNESS_REQUESTS" -gt 0 ]; then
  cargo bench --no-run --bench webhook_load
  phase "in-process harness: 8 keep-alive TLS connections x $HARNESS_REQUESTS admissions (machine still idle of the cluster)"
  HARNESS_LINE=$(NO_WRK=1 REQUESTS=$HARNESS_REQUESTS cargo bench -q --bench webhook_load 2>/dev/null | grep '^webhook load (telemetry' || true)
  log "$HARNESS_LINE"
fi

phase "starting the kwok cluster ($NODES nodes; $SSO_APISERVER_EXTRA_ARGS)"
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
phase "starting the operator"
SSO_BIN=$REPO/target/release/sidecarset-operator KUBECTL=$SSO_WORK/bin/kubectl hack/run-local.sh --background
OPERATOR_PID=$(cat "$SSO_WORK/operator.pid")
if [ "${PERF:-0}" = 1 ]; then
  if command -v perf >/dev/null; then
    perf record -F 99 -g -p "$OPERATOR_PID" -o "$SSO_WORK/perf.data" >"$SSO_WORK/perf.log" 2>&1 &
    PERF_PID=$!
  else
    log "warning: PERF=1 but perf is not installed"
  fi
fi

phase "running the benchmark (crates/e2e/examples/scale_bench.rs)"
OPERATOR_PID=$OPERATOR_PID METRICS_ADDR=127.0.0.1:$SSO_METRICS_PORT WEBHOOK_URL=https://127.0.0.1:$SSO_PORT \
  WRK=$WRK BENCH_WORK=$SSO_WORK CLK_TCK=$(getconf CLK_TCK) HARNESS_LINE=$HARNESS_LINE \
  "$REPO/target/release/examples/scale_bench" >"$REPORT.tmp" &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=
mv "$REPORT.tmp" "$REPORT"
cat "$REPORT"
log "total $((SECONDS - phase_start)) s; report kept in $REPORT; operator log $SSO_WORK/operator.log"
