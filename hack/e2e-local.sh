#!/usr/bin/env bash
# The e2e suite on the local kwok cluster, as `make test` runs it: start the cluster, run the
# operator as a local process (webhooks by URL), run the suite, stop the operator, run the
# operator-down checks, and tear everything down (also on failure or Ctrl-C).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK
export SSO_FAILURE_POLICY=${SSO_FAILURE_POLICY:-Fail}
export SSO_E2E_FAILURE_POLICY=$SSO_FAILURE_POLICY
export SSO_METRICS_PORT=${SSO_METRICS_PORT:-9090}
export SSO_E2E_METRICS_URL=http://127.0.0.1:$SSO_METRICS_PORT/metrics
# The fault tests (crates/e2e/tests/faults.rs) read who wrote what from the API server's audit log.
export SSO_AUDIT_POLICY=${SSO_AUDIT_POLICY:-$REPO/hack/audit-policy.yaml}

log() { printf '[e2e-local] %s\n' "$*" >&2; }
# A command that ends the script through set -e says where (never a silent stop).
trap 'printf "\n[e2e-local] FAILED: line %s exited %s: %s\n\n" "$LINENO" "$?" "$BASH_COMMAND" >&2' ERR

cleanup() {
  rc=$?
  if [ -f "$WORK/operator.pid" ]; then
    kill "$(cat "$WORK/operator.pid")" 2>/dev/null || true
    rm -f "$WORK/operator.pid"
  fi
  if [ "$rc" != 0 ] && [ -f "$WORK/operator.log" ]; then
    log "failed; the operator's last log lines:"
    tail -n 40 "$WORK/operator.log" >&2 || true
  fi
  hack/cluster.sh down || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --bin sidecarset-operator
cargo build -p sidecarset-e2e --tests
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
eval "$(hack/tools.sh helm)"

# The operator runs as a local process under the Helm chart's ServiceAccount: the chart is
# installed with its webhooks pointing at 127.0.0.1 and no in-cluster replicas, so the whole
# suite proves that the chart's RBAC is enough (a missing permission fails a test).
log "installing the chart (webhooks by URL, 0 replicas) and running the operator as its ServiceAccount"
"$HELM_BIN/helm" upgrade --install sidecarset-operator charts/sidecarset-operator -n sidecarset-system \
  --create-namespace --set "webhook.url=https://127.0.0.1:${SSO_PORT:-9443}" --set replicaCount=0 \
  --set webhook.failurePolicy="$SSO_FAILURE_POLICY" --wait --timeout 2m >/dev/null
hack/chart-test.sh sa-kubeconfig "$WORK/sa.kubeconfig" 2h
SSO_OPERATOR_KUBECONFIG=$WORK/sa.kubeconfig SSO_MANAGE_WEBHOOKS=false KUBECTL=$WORK/bin/kubectl \
  hack/run-local.sh --background

log "running the e2e suite with the operator up"
cargo test -p sidecarset-e2e --tests -- --test-threads=4

log "native sidecar mode refused while a node runs a kubelet older than 1.29 (runs alone: the node refuses every native SidecarSet)"
cargo test -p sidecarset-e2e --test native_sidecars -- --ignored --nocapture --test-threads=1

log "pods for the operator-down checks (an injected one, a plain one)"
cargo test -p sidecarset-e2e --test operator_down prepare_pods -- --ignored

log "stopping the operator; checking failurePolicy=$SSO_FAILURE_POLICY, excluded namespaces, pod updates"
kill "$(cat "$WORK/operator.pid")"
rm -f "$WORK/operator.pid"
sleep 1
cargo test -p sidecarset-e2e --test operator_down -- --ignored --skip prepare_pods

log "uninstalling the chart; tests that start their own operators (fresh start, rotation, leader change, files mode)"
"$HELM_BIN/helm" uninstall sidecarset-operator -n sidecarset-system --wait >/dev/null
cargo test -p sidecarset-e2e --test local_process -- --ignored --nocapture --test-threads=1

log "injection in the API server: --injection=auto with every replica stopped, against webhook mode"
cargo test -p sidecarset-e2e --test policy_mode -- --ignored --nocapture --test-threads=1

log "check: each failure it knows, induced on an operator of its own (CRD, conversion, webhooks, caBundle trust, expiry, match conditions, leader, OpenKruise)"
cargo test -p sidecarset-e2e --test check -- --ignored --nocapture --test-threads=1

log "faults: a leader cut off by a partition, an API server restart and etcd down 10 s, mid-rollout"
cargo test -p sidecarset-e2e --test faults -- --ignored --nocapture --test-threads=1

log "faults: the operator crashed right after its k-th write; its k-th Pod event followed by a relist, dropped, coalesced, its view of the pods sent four events back; one k of each for inject and rollout (make test-faults: every k of every scenario)"
SSO_FAULTS_POINTS=${SSO_FAULTS_POINTS:-sample:1} cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: two replicas, the leader crashed right after its k-th write mid-rollout (one k): the other takes over; no controller write after a lost Lease"
SSO_FAULTS_SCENARIOS=leader SSO_FAULTS_PERTURBATIONS=crash SSO_FAULTS_POINTS=sample:1 cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: hot (a HotUpgrade hand-over), the operator crashed right after its k-th write (one k)"
SSO_FAULTS_SCENARIOS=hot SSO_FAULTS_PERTURBATIONS=crash SSO_FAULTS_POINTS=sample:1 cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: regression: rotation with two replicas, a crash at one write (every run checks the retired CA leaves every caBundle within 5 s of the Secret: it stayed trusted until the next rotation)"
SSO_FAULTS_SCENARIOS=rotation SSO_FAULTS_PERTURBATIONS=crash SSO_FAULTS_POINTS=sample:1 cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: regression: evict with the Pod watch cut right after its 4th event (an original pod the lagging cache missed was taken for a replacement and stopped the evictions)"
SSO_FAULTS_SCENARIOS=evict SSO_FAULTS_PERTURBATIONS=relist SSO_FAULTS_POINTS=4 cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: regression: revision with the view of the pods sent four events back at its 45th Pod event (the rollback upgraded 4 pods at once with maxUnavailable 2: the cache did not show the pods it had just upgraded)"
SSO_FAULTS_SCENARIOS=revision SSO_FAULTS_PERTURBATIONS=stale SSO_FAULTS_POINTS=45 cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1

log "faults: input sequences (Acto-style; make test-inputs runs 23 of 12 steps), 5 SidecarSet changes derived from the CRD schema each, followed or refused: seed 1791 (an update selector, a rollout, a refused request \"lots\" (the regression: it was accepted), a narrower selector, a rollout of the selected pods only) and seed 4407 (maxUnavailable 1, a refused second container, a weight priority for tier a, a rollout that must upgrade tier a first, a scatter)"
SSO_FAULTS_INPUTS_SEEDS=1791,4407 SSO_FAULTS_INPUTS_STEPS=5 cargo test -p sidecarset-e2e --test inputs -- --ignored --nocapture --test-threads=1

log "migration from OpenKruise (recreates the SidecarSet CRD in OpenKruise's state; runs alone)"
cargo test -p sidecarset-e2e --test migration -- --ignored --nocapture --test-threads=1

log "migration from OpenKruise's chart layout with migrate from-openkruise (Helm; pods created in a loop throughout)"
HELM_BIN=$HELM_BIN cargo test -p sidecarset-e2e --test migration_helm -- --ignored --nocapture --test-threads=1

log "coexistence with OpenKruise's manager (a stand-in): nothing of what it writes written by us; a watch torn down over and over is degraded"
HELM_BIN=$HELM_BIN cargo test -p sidecarset-e2e --test coexistence -- --ignored --nocapture --test-threads=1
