#!/usr/bin/env bash
# `make demo`: a local cluster, the operator, a sample SidecarSet and Deployment; prints the
# injected pod's containers and keeps running until Ctrl-C, which cleans everything up.
# `hack/demo.sh down` (make demo-down) cleans up a demo left running elsewhere.
#
# Where the real node of hack/node.sh can run (root on Linux), the pods run there for real: the
# demo shows the injected sidecar's log line, upgrades it in place (v1 -> v2) and shows the new
# log line and the restart. Elsewhere (or with SSO_DEMO_KWOK=1) it falls back to kwok's
# simulated nodes and says so.
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
  hack/node.sh down >/dev/null 2>&1 || true
}
if [ "${1:-}" = down ]; then
  down
  exit 0
fi

real_node_demo() {
  trap 'hack/node.sh down' EXIT
  trap 'exit 0' INT TERM
  cargo build --bin sidecarset-operator
  hack/node.sh up
  eval "$(hack/node.sh env)"
  local k=(hack/node.sh exec "$SSO_NODE_KUBECTL")
  # The operator runs as a local process next to the API server, in the node's network namespace
  # (webhooks by URL on 127.0.0.1 there); `hack/node.sh down` stops it with everything else.
  mkdir -p "$WORK/node/demo"
  hack/node.sh exec env KUBECTL="$SSO_NODE_KUBECTL" SSO_WORK="$WORK/node/demo" hack/run-local.sh --background
  echo "--- a SidecarSet (a log-shipper sidecar and a native proxy sidecar) and a Deployment on the real node $SSO_NODE_NAME"
  "${k[@]}" apply -f - <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata: {name: demo-sidecars}
spec:
  selector: {matchLabels: {app: demo}}
  namespaceSelector: {matchLabels: {sidecar-injection: enabled}}
  containers:
  - name: log-shipper
    image: localhost/sso-e2e/busybox:v1
    command: [sh, -c, 'trap "exit 0" TERM; echo "log-shipper: running image \$(cat /etc/image-version)"; while true; do sleep 1; done']
  initContainers:
  - name: proxy
    image: localhost/sso-e2e/busybox:v1
    restartPolicy: Always
    command: [sh, -c, 'trap "exit 0" TERM; echo "proxy: running image \$(cat /etc/image-version)"; while true; do sleep 1; done']
  updateStrategy: {type: RollingUpdate, maxUnavailable: 1}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {sidecar-injection: enabled}}
EOF
  # The operator's index follows SidecarSets through a watch: wait until a dry run is injected.
  for _ in $(seq 60); do
    "${k[@]}" -n demo run probe --image=localhost/sso-e2e/busybox:v1 --labels=app=demo --dry-run=server \
      -o jsonpath='{.spec.containers[*].name}' 2>/dev/null | grep -q log-shipper && break
    sleep 0.5
  done
  "${k[@]}" apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: demo, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $SSO_NODE_NAME}
      tolerations: [{key: sidecarset-operator.io/real-node, operator: Exists, effect: NoSchedule}]
      terminationGracePeriodSeconds: 5
      containers:
      - name: app
        image: localhost/sso-e2e/busybox:v1
        command: [sh, -c, 'trap "exit 0" TERM; echo "app: running"; while true; do sleep 1; done']
EOF
  "${k[@]}" -n demo rollout status deployment/demo --timeout=120s
  local pod
  pod=$("${k[@]}" -n demo get pods -l app=demo -o jsonpath='{.items[0].metadata.name}')
  show() {
    echo "init containers: $("${k[@]}" -n demo get pod "$pod" -o jsonpath='{range .spec.initContainers[*]}{.name}={.image} (restartPolicy={.restartPolicy}) {end}')"
    echo "containers:      $("${k[@]}" -n demo get pod "$pod" -o jsonpath='{range .spec.containers[*]}{.name}={.image} {end}')"
    echo "restarts:        $("${k[@]}" -n demo get pod "$pod" -o jsonpath='{range .status.initContainerStatuses[*]}{.name}={.restartCount} {end}{range .status.containerStatuses[*]}{.name}={.restartCount} {end}')"
    echo "pod UID:         $("${k[@]}" -n demo get pod "$pod" -o jsonpath='{.metadata.uid}')"
    echo "sidecar logs:    $("${k[@]}" -n demo logs "$pod" -c log-shipper) | $("${k[@]}" -n demo logs "$pod" -c proxy)"
  }
  echo "--- pod demo/$pod, running on the real node (injected by: $("${k[@]}" -n demo get pod "$pod" -o jsonpath='{.metadata.annotations.kruise\.io/sidecarset-injected-list}'))"
  show
  echo "--- in-place upgrade: the SidecarSet's images v1 -> v2"
  "${k[@]}" patch sidecarset demo-sidecars --type json -p '[{"op":"replace","path":"/spec/containers/0/image","value":"localhost/sso-e2e/busybox:v2"},{"op":"replace","path":"/spec/initContainers/0/image","value":"localhost/sso-e2e/busybox:v2"}]'
  for _ in $(seq 120); do
    [ "$("${k[@]}" get sidecarset demo-sidecars -o jsonpath='{.status.observedGeneration}/{.status.updatedReadyPods}')" = 2/2 ] && break
    sleep 0.5
  done
  echo "--- pod demo/$pod after the upgrade (same pod: restartCount + 1 for the sidecars, the app untouched)"
  show
  "${k[@]}" get sidecarsets
  echo
  echo "The node keeps running: hack/node.sh exec kubectl get pods -A (operator log: $WORK/node/demo/operator.log)"
  echo "Press Ctrl-C to stop the demo and the node."
  while kill -0 "$SSO_NODE_NS_PID" 2>/dev/null; do sleep 2; done
  echo "the node stopped" >&2
  exit 1
}

if [ "${SSO_DEMO_KWOK:-0}" != 1 ]; then
  if why=$(hack/node.sh check 2>&1); then
    real_node_demo
  fi
  echo "--- the real node cannot run on this machine, so the demo uses kwok's simulated nodes (pods are"
  echo "    scheduled and marked Running, but no container runs):"
  printf '%s\n' "$why" | sed -n 's/^\[node\]   - /    - /p'
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
