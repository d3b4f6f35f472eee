#!/usr/bin/env bash
# Pod creation through the API server on its own local cluster: no injector, the operator's
# MutatingAdmissionPolicy (--injection=auto) and its webhook, for 1, 10 and 100 SidecarSets of
# which 3 select the pod (crates/e2e/examples/policy_bench.rs). Prints a table, cleans up.
#
#   SSO_BENCH_ROUNDS=2 SSO_BENCH_SEQUENTIAL=200 SSO_BENCH_PARALLEL=400 hack/bench-policy.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export SSO_WORK=${SSO_WORK:-/tmp/sidecarset-bench-policy}
export SSO_CLUSTER_NAME=${SSO_CLUSTER_NAME:-sidecarset-bench-policy}

cleanup() { hack/cluster.sh down || true; }
trap cleanup EXIT

cargo build --release --bin sidecarset-operator
cargo build --release -p sidecarset-e2e --example policy_bench
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
SSO_E2E_BIN=$REPO/target/release/sidecarset-operator "$REPO/target/release/examples/policy_bench"
