#!/usr/bin/env bash
# `make demo`: a local cluster, the operator, a sample SidecarSet and Deployment; prints the
# injected pod's containers and keeps running until Ctrl-C, which cleans everything up.
# `hack/demo.sh down` (make demo-down) cleans up a demo left running elsewhere.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK

down() {
  if [ -f "$WORK/operator.pid" ]; then
    kill "$(cat "$WORK/operator.pid")" 2>/dev/null || true
    rm -f "$WORK/operator.pid"
  fi
  hack/cluster.sh down
}
if [ "${1:-}" = down ]; then
  down
  exit 0
fi
trap down EXIT
trap 'exit 0' INT TERM

cargo build --bin sidecarset-operator
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
KUBECTL=$WORK/bin/kubectl
export KUBECTL
hack/run-local.sh --background

echo "--- applying config/samples/sidecarset.yaml and config/samples/deployment.yaml"
"$KUBECTL" apply -f config/samples/sidecarset.yaml
"$KUBECTL" apply -f config/samples/deployment.yaml
"$KUBECTL" -n demo rollout status deployment/demo --timeout=120s
pod=$("$KUBECTL" -n demo get pods -l app=demo -o jsonpath='{.items[0].metadata.name}')
echo "--- pod demo/$pod"
echo "init containers: $("$KUBECTL" -n demo get pod "$pod" -o jsonpath='{range .spec.initContainers[*]}{.name} (restartPolicy={.restartPolicy}) {end}')"
echo "containers:      $("$KUBECTL" -n demo get pod "$pod" -o jsonpath='{range .spec.containers[*]}{.name} {end}')"
echo "injected by:     $("$KUBECTL" -n demo get pod "$pod" -o jsonpath='{.metadata.annotations.kruise\.io/sidecarset-injected-list}')"
"$KUBECTL" get sidecarsets
echo
echo "The cluster keeps running: KUBECONFIG=$WORK/kubeconfig $KUBECTL get pods -A"
echo "Press Ctrl-C to stop the demo and delete the cluster."
while kill -0 "$(cat "$WORK/operator.pid")" 2>/dev/null; do sleep 2; done
echo "the operator stopped; see $WORK/operator.log" >&2
exit 1
