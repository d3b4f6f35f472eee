#!/usr/bin/env bash
# Controller load run on its own local kwok cluster: N matched pods (PODS, default 5000), status
# convergence, operator memory, rollout time of an image change (maxUnavailable 10%) next to a
# bare client's pod-patch rate. Prints the figures and cleans up.
#
#   PODS=5000 hack/bench-controller.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export SSO_WORK=${SSO_WORK:-/tmp/sidecarset-bench}
export SSO_CLUSTER_NAME=${SSO_CLUSTER_NAME:-sidecarset-bench}
export SSO_PORT=${SSO_PORT:-9543}
export SSO_METRICS_PORT=${SSO_METRICS_PORT:-9591}
PODS=${PODS:-5000}
# Fake nodes take 110 pods each: enough of them for every pod.
export SSO_NODES=${SSO_NODES:-$((PODS / 100 + 2))}

cleanup() {
  if [ -f "$SSO_WORK/operator.pid" ]; then
    kill "$(cat "$SSO_WORK/operator.pid")" 2>/dev/null || true
    rm -f "$SSO_WORK/operator.pid"
  fi
  hack/cluster.sh down || true
}
trap cleanup EXIT

cargo build --release --bin sidecarset-operator
cargo build --release -p sidecarset-e2e --example controller_bench
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
SSO_BIN=$REPO/target/release/sidecarset-operator KUBECTL=$SSO_WORK/bin/kubectl hack/run-local.sh --background
OPERATOR_PID=$(cat "$SSO_WORK/operator.pid") PODS=$PODS "$REPO/target/release/examples/controller_bench"
