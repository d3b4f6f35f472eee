#!/usr/bin/env bash
# The real-node suites, as `make test` runs them (after the kwok suites): on the real node of
# hack/node.sh (kubelet + containerd + runc, control plane in the node's namespaces):
#
#   1. image    the operator's image, built from the operator binary with the Dockerfile's runtime
#               layout (hack/images.sh), agrees with the Dockerfile (user, entrypoint, cmd,
#               exposed ports, labels) and its binary runs in it as user 65532
#   2. install  the install page's commands as written (docs/src/install/helm.md) (the image variables set to the node's
#               image), then its verify command (check: all ok): the chart in Service mode (2 replicas, probes, PDB, the chart's
#               ServiceAccount and RBAC, self-managed certificates) with that image on the real
#               node; the API server calls the webhooks and the CRD conversion through the Service
#               (endpoint routing: the Service's ClusterIP is not reachable here); a pod created
#               after install is injected and its sidecar really runs
#   3. rollout  crates/e2e/tests/real_node.rs against that install: in-place upgrades of container and
#               native sidecars, unpullable images, rollback, tag alias, a hot upgrade (HotUpgrade:
#               the hot images of hack/images.sh hand over through a shared volume)
#   4. upgrade  pod admissions from several clients at once (hack/admissions.py: 4 clients, 80/s
#               in all, each on its own keep-alive connection to the API server) through a helm
#               upgrade that replaces every replica, then through a drain-like eviction of every
#               replica (Eviction API, retried while the PodDisruptionBudget refuses, as kubectl
#               drain does): N attempted, 0 failed each (SSO_E2E_UPGRADE_FAILURES_OK=1 reports
#               failures instead of failing); helm upgrade keeps the operator's caBundle and
#               certificate, applies new values, pods are still injected
#   5. uninstall  removes the chart's objects; the CRD, SidecarSets, certificate Secret and Lease
#               stay (as the chart README says)
#
# On a machine that cannot run the node (hack/node.sh check: not root, not Linux, missing cgroup
# controllers or kernel features) the suites are skipped with the reason, unless CI is set or
# SSO_REQUIRE_REAL_NODE=1 (then that is a failure). SSO_REQUIRE_REAL_NODE=0 skips even in CI.
#
# Env: SSO_WORK (default <repo>/.local), SSO_E2E_NODE_THREADS (parallel rollout tests, default 3),
# SSO_E2E_NODE_FILTER (run only the rollout tests whose name contains it), SSO_KEEP_NODE=1
# (leave the node running afterwards); for step 4: SSO_E2E_SHUTDOWN_DELAY (the chart's
# shutdownDelaySeconds for every install and upgrade; unset: the chart's default; 0 shows the
# failures the delay prevents), SSO_E2E_ADMISSION_CLIENTS (4), SSO_E2E_ADMISSION_RATE (80 per s),
# SSO_E2E_SKIP_ROLLOUT=1 (leave out step 3).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK
mkdir -p "$WORK"
RELEASE=sidecarset-operator
NS=sidecarset-system
# The operator's pods: not the chart's `helm test` pod, which stays after it ran (for its logs).
OPERATOR_PODS='app.kubernetes.io/name=sidecarset-operator,app.kubernetes.io/component!=test'
CRD=sidecarsets.apps.kruise.io
START=$SECONDS

log() { printf '[e2e-node] %s\n' "$*" >&2; }
die() { printf '\n[e2e-node] FAILED: %s\n\n' "$*" >&2; exit 1; }
# A command that ends the script through set -e says where (never a silent stop).
trap 'printf "\n[e2e-node] FAILED: line %s exited %s: %s\n\n" "$LINENO" "$?" "$BASH_COMMAND" >&2' ERR
pass() { printf '[e2e-node]   ok  %s\n' "$*" >&2; }
section() { printf '\n[e2e-node] ==== %s (%d s)\n' "$*" "$((SECONDS - START))" >&2; }

require=0
if [ "${SSO_REQUIRE_REAL_NODE:-}" = 1 ]; then require=1
elif [ "${SSO_REQUIRE_REAL_NODE:-}" != 0 ] && [ -n "${CI:-}" ] && [ "${CI:-}" != false ]; then require=1; fi

rm -f "$WORK/skipped-suites"
if ! why=$(hack/node.sh check 2>&1); then
  printf '%s\n' "$why" >&2
  if [ "$require" = 1 ]; then
    die "the real-node suites must run here (CI or SSO_REQUIRE_REAL_NODE=1), but this machine cannot run the node (see above)"
  fi
  reasons=$(printf '%s\n' "$why" | sed -n 's/^\[node\]   - //p' | paste -sd ';' -)
  echo "real-node suites (hack/e2e-node.sh: operator image, helm install on a real node, in-place upgrades on a real kubelet): $reasons" \
    >"$WORK/skipped-suites"
  log "SKIPPED the real-node suites: this machine cannot run the node: $reasons"
  log "(set SSO_REQUIRE_REAL_NODE=1 to make this a failure; CI does)"
  exit 0
fi

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -n "${KUBECTL:-}" ] && hack/node.sh status >/dev/null 2>&1; then
    log "failed; the operator's last log lines:"
    hack/node.sh exec "$KUBECTL" -n "$NS" logs -l "$OPERATOR_PODS" --tail=30 --prefix >&2 2>/dev/null || true
  fi
  if [ "${SSO_KEEP_NODE:-0}" = 1 ]; then
    log "SSO_KEEP_NODE=1: the node keeps running (hack/node.sh down)"
  else
    hack/node.sh down || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The image's binary: the dev-profile build the other suites run (default), or the release profile
# the Dockerfile builds (SSO_IMAGE_PROFILE=release: about 17 min more on 2 cores, cold). These
# suites check behaviour (admission, conversion, helm install, in-place upgrades on a kubelet),
# not speed: the same sources with the same features (hack/features.sh) and the same linked
# libraries, in the Dockerfile's runtime layout; the dev build adds overflow checks and debug
# assertions. Speed is measured in release by the benchmarks (make bench*).
case "${SSO_IMAGE_PROFILE:-dev}" in
  dev) profile_dir=debug; profile_args=() ;;
  release) profile_dir=release; profile_args=(--release) ;;
  *) die "SSO_IMAGE_PROFILE must be dev or release, not '${SSO_IMAGE_PROFILE}'" ;;
esac
export SSO_OPERATOR_BIN=$REPO/target/$profile_dir/sidecarset-operator
section "build: the operator binary for the image (${SSO_IMAGE_PROFILE:-dev} profile), the e2e tests"
cargo build "${profile_args[@]}" --bin sidecarset-operator
[ "${SSO_E2E_SKIP_ROLLOUT:-0}" = 1 ] || cargo build -p sidecarset-e2e --tests

section "node"
t=$SECONDS
# The endpoint controllers write a pod's removal from the Service 1 s late, as those of a busy
# cluster do (their batch period; on this idle control plane it would take milliseconds, and a
# replica that stopped accepting at SIGTERM would hardly ever be caught): the window the
# operator's --shutdown-delay (the chart's shutdownDelaySeconds) must cover.
export SSO_CONTROLLER_MANAGER_EXTRA_ARGS=${SSO_CONTROLLER_MANAGER_EXTRA_ARGS-endpointslice-updates-batch-period=1s endpoint-updates-batch-period=1s}
hack/node.sh up
log "node up in $((SECONDS - t)) s"
eval "$(hack/node.sh env)"
KUBECTL=$SSO_NODE_KUBECTL
eval "$(hack/tools.sh helm)"
IMG_DIR=$(dirname "$SSO_E2E_IMAGE_IDS")
k() { hack/node.sh exec "$KUBECTL" --request-timeout=20s "$@"; }
helm() { hack/node.sh exec "$HELM_BIN/helm" "$@"; }
jp() { k "$@" 2>/dev/null || true; }

# ---------------------------------------------------------------------------------------------
section "image: the local operator image against the Dockerfile"
hack/images.sh check "$IMG_DIR"
pass "operator image $SSO_OPERATOR_IMAGE (from target/$profile_dir) agrees with the Dockerfile"

# ---------------------------------------------------------------------------------------------
section "install window: an image the node cannot pull blocks no pod of the cluster"
# helm install with an image no node can pull: no replica ever answers. Pods are created in
# other namespaces for SSO_E2E_WINDOW_SECONDS (default 120): none may be refused (the pod
# webhook is Fail). Then the image is fixed by helm upgrade: a SidecarSet's pods are injected.
WIN=sso-window
WIN_NS=sso-window-system
WIN_APP=sso-window-app
window_s=${SSO_E2E_WINDOW_SECONDS:-120}
placement=(--set "nodeSelector.kubernetes\.io/hostname=$SSO_E2E_REAL_NODE"
  --set "tolerations[0].key=sidecarset-operator.io/real-node" --set "tolerations[0].operator=Exists"
  --set "tolerations[0].effect=NoSchedule")
t=$SECONDS
helm install "$WIN" charts/sidecarset-operator -n "$WIN_NS" --create-namespace "${placement[@]}" \
  --set image.repository=localhost/sso-e2e/not-pullable --set image.tag=none >/dev/null \
  || die "helm install with an unpullable image failed"
k create namespace "$WIN_APP" >/dev/null
node_pod() { # NAME NAMESPACE APP: a pod on the real node, labelled app=APP, its app container running
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $2, labels: {app: $3}}
spec:
  nodeSelector: {kubernetes.io/hostname: $SSO_E2E_REAL_NODE}
  tolerations: [{key: sidecarset-operator.io/real-node, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: localhost/sso-e2e/busybox:v1
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
EOF
}
window_pod() { # NAME NAMESPACE: created on the node
  node_pod "$1" "$2" "$WIN_APP" | k apply -f - >/dev/null
}
created=0 refused=0 n=0
deadline=$((SECONDS + window_s))
while [ "$SECONDS" -lt "$deadline" ]; do
  n=$((n + 1))
  for ns in default "$WIN_APP"; do
    if [ $((n % 10)) = 1 ]; then
      # a real pod every tenth round, a server-side dry run (the same admission) otherwise
      if window_pod "w-$n" "$ns" 2>"$WORK/window.err"; then
        created=$((created + 1))
      else
        refused=$((refused + 1)); cat "$WORK/window.err" >&2
      fi
    elif k -n "$ns" run "w-$n" --dry-run=server -o name --image=localhost/sso-e2e/busybox:v1 --labels="app=$WIN_APP" >/dev/null 2>"$WORK/window.err"; then
      created=$((created + 1))
    else
      refused=$((refused + 1)); cat "$WORK/window.err" >&2
    fi
  done
  sleep 1
done
pulling=$(jp -n "$WIN_NS" get pods -l "$OPERATOR_PODS" -o jsonpath='{.items[*].status.containerStatuses[0].state.waiting.reason}')
[ -z "$(jp -n "$WIN_NS" get deploy "$WIN" -o jsonpath='{.status.readyReplicas}')" ] \
  || die "an operator replica became ready with an image the node cannot pull"
[ "$refused" = 0 ] || die "install window: $refused of $((created + refused)) pod creations refused while no replica answered"
pass "install window: $created pod creations in default and $WIN_APP over ${window_s} s, 0 refused, while no replica could start (${pulling:-no status})"
# Fix the image: the replicas start, a SidecarSet is admitted (its webhooks are Fail) and widens
# the pod webhook's condition before its admission is answered; its pods are injected.
helm upgrade "$WIN" charts/sidecarset-operator -n "$WIN_NS" --reuse-values \
  --set "image.repository=${SSO_OPERATOR_IMAGE%:*}" --set "image.tag=${SSO_OPERATOR_IMAGE##*:}" \
  --wait --timeout 120s >/dev/null || die "helm upgrade with the image fixed failed"
k apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1beta1
kind: SidecarSet
metadata: {name: $WIN_APP}
spec:
  selector: {matchLabels: {app: $WIN_APP}}
  containers:
  - name: window-sidecar
    image: localhost/sso-e2e/busybox:v1
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
EOF
# The webhook's index follows SidecarSets through a watch: wait until a dry run is injected.
for i in $(seq 60); do
  k -n "$WIN_APP" run probe --dry-run=server -o jsonpath='{.spec.containers[*].name}' --image=localhost/sso-e2e/busybox:v1 --labels="app=$WIN_APP" 2>/dev/null | grep -q window-sidecar && break
  [ "$i" != 60 ] || die "a dry-run pod in $WIN_APP is not injected 30 s after the SidecarSet was admitted"
  sleep 0.5
done
window_pod w-injected "$WIN_APP" || die "a pod the SidecarSet selects was refused after the fix"
names=$(k -n "$WIN_APP" get pod w-injected -o jsonpath='{.spec.containers[*].name}')
[ "$names" = "window-sidecar app" ] || die "after the image was fixed, the SidecarSet's pod has containers '$names'"
k -n "$WIN_APP" wait --for=condition=Ready pod/w-injected --timeout=60s >/dev/null || die "the injected pod w-injected is not Ready"
pass "image fixed by helm upgrade: replicas ready, SidecarSet admitted, its pod injected and Ready ($((SECONDS - t)) s in all)"
k delete sidecarset "$WIN_APP" --wait=false >/dev/null
k delete namespace "$WIN_APP" --wait=false >/dev/null
k -n default delete pods -l "app=$WIN_APP" --wait=false >/dev/null
helm uninstall "$WIN" -n "$WIN_NS" --wait >/dev/null || die "helm uninstall $WIN failed"
k delete namespace "$WIN_NS" --wait=false >/dev/null

# ---------------------------------------------------------------------------------------------
section "install: the install page's commands on the real node (Service mode)"
VALUES=$WORK/e2e-node-values.yaml
cat >"$VALUES" <<EOF
image: {repository: ${SSO_OPERATOR_IMAGE%:*}, tag: ${SSO_OPERATOR_IMAGE##*:}}
nodeSelector: {kubernetes.io/hostname: $SSO_E2E_REAL_NODE}
tolerations: [{key: sidecarset-operator.io/real-node, operator: Exists, effect: NoSchedule}]
EOF
SHUTDOWN_VALUES=()
if [ -n "${SSO_E2E_SHUTDOWN_DELAY:-}" ]; then
  echo "shutdownDelaySeconds: $SSO_E2E_SHUTDOWN_DELAY" >>"$VALUES"
  SHUTDOWN_VALUES=("shutdownDelaySeconds: $SSO_E2E_SHUTDOWN_DELAY")
  log "SSO_E2E_SHUTDOWN_DELAY=$SSO_E2E_SHUTDOWN_DELAY: every install and upgrade runs with shutdownDelaySeconds=$SSO_E2E_SHUTDOWN_DELAY"
fi
# The install page's fenced sh block between <!-- NAME ... --> and <!-- end-NAME -->, as written
# (README.md repeats the install block; `cargo xtask docs-check` keeps the two equal).
INSTALL_PAGE=docs/src/install/helm.md
doc_block() {
  awk -v b="<!-- $1" -v e="<!-- end-$1 -->" \
    'index($0, e) == 1 { on = 0 } on && /^```/ { f = !f; next } on && f { print } index($0, b) == 1 { on = 1 }' "$INSTALL_PAGE"
}
install_cmds=$(doc_block install-commands)
verify_cmds=$(doc_block verify-commands)
grep -q '^helm install ' <<<"$install_cmds" || die "$INSTALL_PAGE has no install-commands block with a helm install"
{ grep -q '^IMAGE_REPOSITORY=' <<<"$install_cmds" && grep -q '^IMAGE_TAG=' <<<"$install_cmds"; } \
  || die "the install block of $INSTALL_PAGE does not set IMAGE_REPOSITORY and IMAGE_TAG (without them the pods end in ImagePullBackOff)"
[ -n "$verify_cmds" ] || die "$INSTALL_PAGE has no verify-commands block"
# Run as written, with two differences a user's cluster does not need: the image variables name
# the image the node has, and helm adds the node's placement (nodeSelector, toleration of its
# taint) to install and upgrade, through a wrapper first on PATH.
install_cmds=$(sed -e "s|^IMAGE_REPOSITORY=.*|IMAGE_REPOSITORY=${SSO_OPERATOR_IMAGE%:*}|" \
  -e "s|^IMAGE_TAG=.*|IMAGE_TAG=${SSO_OPERATOR_IMAGE##*:}|" <<<"$install_cmds")
README_BIN=$WORK/readme-bin
mkdir -p "$README_BIN"
printf '%s\n' "nodeSelector: {kubernetes.io/hostname: $SSO_E2E_REAL_NODE}" \
  "tolerations: [{key: sidecarset-operator.io/real-node, operator: Exists, effect: NoSchedule}]" \
  "${SHUTDOWN_VALUES[@]}" >"$WORK/e2e-node-placement.yaml"
printf '%s\n' '#!/usr/bin/env bash' \
  "case \"\${1:-}\" in install|upgrade) exec \"$HELM_BIN/helm\" \"\$@\" -f \"$WORK/e2e-node-placement.yaml\" ;; esac" \
  "exec \"$HELM_BIN/helm\" \"\$@\"" >"$README_BIN/helm"
chmod +x "$README_BIN/helm"
ln -sf "$KUBECTL" "$README_BIN/kubectl"
ln -sf "$REPO/target/$profile_dir/sidecarset-operator" "$README_BIN/sidecarset-operator"
log "the install page's commands (image variables set to $SSO_OPERATOR_IMAGE):"
while IFS= read -r line; do printf '      %s\n' "$line"; done <<<"$install_cmds" >&2
t=$SECONDS
hack/node.sh exec env PATH="$README_BIN:$PATH" bash -euo pipefail -c "$install_cmds" >"$WORK/readme-install.log" 2>&1 \
  || { cat "$WORK/readme-install.log" >&2; die "the install page's commands failed"; }
pass "the install page's commands (helm install --wait): done in $((SECONDS - t)) s"
# Its verify block: check in Service mode, two replicas, self-managed certificates: all ok.
t=$SECONDS
for i in $(seq 30); do
  # A warning exits 0 (check without --strict): wait for every line ok.
  if hack/node.sh exec env PATH="$README_BIN:$PATH" bash -euo pipefail -c "$verify_cmds" >"$WORK/readme-verify.log" 2>&1 \
    && grep -q '^all 11 checks ok' "$WORK/readme-verify.log"; then break; fi
  [ "$i" = 30 ] && { cat "$WORK/readme-verify.log" >&2; die "the install page's verify command did not report all ok within 60 s"; }
  sleep 2
done
sed 's/^/      /' "$WORK/readme-verify.log" >&2
grep -q '^all 11 checks ok' "$WORK/readme-verify.log" || die "check did not say all 11 checks ok"
pass "the install page's verify command: sidecarset-operator check, all 11 checks ok in Service mode ($((SECONDS - t)) s)"
[ "$(jp -n "$NS" get deploy "$RELEASE" -o jsonpath='{.status.readyReplicas}/{.spec.replicas}')" = 2/2 ] || die "the Deployment is not 2/2 ready"
pods=$(k -n "$NS" get pods -l "$OPERATOR_PODS" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.spec.serviceAccountName} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].imageID}{"\n"}{end}')
[ "$(echo "$pods" | grep -c " $SSO_E2E_REAL_NODE $RELEASE true sha256:")" = 2 ] || die "expected 2 ready operator pods on $SSO_E2E_REAL_NODE as ServiceAccount $RELEASE: $pods"
pass "2 replicas ready on $SSO_E2E_REAL_NODE, running as ServiceAccount $RELEASE, image from the node's containerd"
# `helm test`: the chart's test pod runs `sidecarset-operator check` in the cluster, as its own
# ServiceAccount (the chart's test RBAC), and succeeds.
t=$SECONDS
hack/node.sh exec env PATH="$README_BIN:$PATH" helm test "$RELEASE" -n "$NS" --logs --timeout 2m >"$WORK/helm-test.log" 2>&1 \
  || { cat "$WORK/helm-test.log" >&2; die "helm test failed"; }
if ! { grep -q 'Phase: *Succeeded' "$WORK/helm-test.log" && grep -q '^all 11 checks ok' "$WORK/helm-test.log"; }; then
  cat "$WORK/helm-test.log" >&2
  die "helm test: no Succeeded phase or not all 11 checks ok"
fi
[ -z "$(k get clusterrole -l app.kubernetes.io/instance="$RELEASE" -o name | grep test-check || true)" ] \
  || die "helm test left its ClusterRole behind after succeeding"
pass "helm test: sidecarset-operator check in the chart's test pod, all 11 checks ok, its RBAC removed ($((SECONDS - t)) s)"
# The install's NOTES as Helm rendered them: steps 4 and 5 (a SidecarSet, a namespace, a pod it
# selects, what to look at) run as written, each `# -> EXPECTED` line compared with what the
# command before it printed, then the NOTES' clean-up line. (The pod has no toleration of the
# real node's taint: it lands on the kwok node, which is all admission needs.)
t=$SECONDS
hack/node.sh exec env PATH="$README_BIN:$PATH" helm get notes "$RELEASE" -n "$NS" >"$WORK/notes.txt"
notes_cmds=$(awk '/^4\. /{on=1; next} /^   Clean up:/{on=0} on && /^     /{sub(/^     /, ""); print}' "$WORK/notes.txt")
notes_cleanup=$(sed -n 's/^   Clean up: //p' "$WORK/notes.txt")
if ! { grep -q '^kubectl -n sidecar-demo run hello ' <<<"$notes_cmds" && grep -q '^# -> ' <<<"$notes_cmds" && [ -n "$notes_cleanup" ]; }; then
  cat "$WORK/notes.txt" >&2
  die "NOTES.txt has no step 4/5 with a pod, an expected output (# -> ...) and a clean-up line"
fi
# Each expectation follows its command: run the commands up to it, compare the last output line.
expected_n=0
script=""
while IFS= read -r line; do
  if [[ $line == '# -> '* ]]; then
    want=${line#'# -> '}
    want=${want%%'  '*}
    out=$(hack/node.sh exec env PATH="$README_BIN:$PATH" bash -euo pipefail -c "$script" 2>&1) \
      || die "NOTES.txt's commands before '# -> $want' failed: $(tail -n3 <<<"$out")"
    got=$(tail -n1 <<<"$out")
    [ "$got" = "$want" ] || die "NOTES.txt says '# -> $want' but the command before it printed '$got'"
    expected_n=$((expected_n + 1))
    script=""
  else
    script+=$line$'\n'
  fi
done <<<"$notes_cmds"
[ -n "$script" ] && { hack/node.sh exec env PATH="$README_BIN:$PATH" bash -euo pipefail -c "$script" >/dev/null 2>&1 || die "NOTES.txt's step 5 commands failed"; }
hack/node.sh exec env PATH="$README_BIN:$PATH" bash -euo pipefail -c "$notes_cleanup" >/dev/null 2>&1 || die "NOTES.txt's clean-up line failed: $notes_cleanup"
pass "NOTES.txt's steps 4 and 5 run as Helm rendered them, $expected_n printed result as the NOTES say, clean-up line done ($((SECONDS - t)) s)"
probes=$(k -n "$NS" get deploy "$RELEASE" -o jsonpath='{.spec.template.spec.containers[0].startupProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.scheme}')
[ "$probes" = "/healthz /healthz /readyz HTTPS" ] || die "probes: $probes"
restarts=$(k -n "$NS" get pods -l "$OPERATOR_PODS" -o jsonpath='{.items[*].status.containerStatuses[0].restartCount}')
[ "$restarts" = "0 0" ] || die "operator restarts: $restarts (liveness or startup probe failed?)"
pass "startup/liveness /healthz and readiness /readyz over HTTPS pass on the kubelet (no restarts)"
pdb=$(k -n "$NS" get pdb "$RELEASE" -o jsonpath='{.spec.minAvailable} {.status.currentHealthy} {.status.disruptionsAllowed}')
[ "$pdb" = "1 2 1" ] || die "PodDisruptionBudget (minAvailable currentHealthy disruptionsAllowed): $pdb"
pass "PodDisruptionBudget minAvailable 1: 2 healthy, 1 disruption allowed"
ca_m=$(k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
ca_v=$(k get validatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
svc=$(k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}:{.webhooks[0].clientConfig.service.port} url={.webhooks[0].clientConfig.url}')
{ [ -n "$ca_m" ] && [ "$ca_m" = "$ca_v" ]; } || die "caBundle not written to both webhook configurations"
[ "$svc" = "$NS/$RELEASE-webhook:443 url=" ] || die "the webhooks do not point at the Service: $svc"
k -n "$NS" get secret "$RELEASE-webhook-certs" >/dev/null || die "no certificate Secret $RELEASE-webhook-certs"
conv=$(k get crd "$CRD" -o jsonpath='{.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name}{.spec.conversion.webhook.clientConfig.service.path}')
[ "$conv" = "$NS/$RELEASE-webhook/convert" ] || die "CRD conversion webhook: $conv"
pass "self-managed certificates: Secret $RELEASE-webhook-certs, caBundle in both webhook configurations, CRD conversion via the Service"
# No kube-proxy: the Service's ClusterIP leads nowhere, so every webhook call below goes to an
# endpoint IP (--enable-aggregator-routing=true), through the Service's EndpointSlice.
cip=$(k -n "$NS" get svc "$RELEASE-webhook" -o jsonpath='{.spec.clusterIP}')
if hack/node.sh exec timeout 3 bash -c "exec 3<>/dev/tcp/$cip/443" 2>/dev/null; then die "the ClusterIP $cip:443 answers: the test would not prove endpoint routing"; fi
eps=$(k -n "$NS" get endpointslices -l kubernetes.io/service-name="$RELEASE-webhook" -o jsonpath='{.items[*].endpoints[*].addresses[0]}')
pass "ClusterIP $cip:443 unreachable; endpoints $eps (the pods' IPs)"

DEMO=e2e-node-demo
k apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1beta1
kind: SidecarSet
metadata: {name: $DEMO}
spec:
  selector: {matchLabels: {app: $DEMO}}
  containers:
  - name: hello-sidecar
    image: localhost/sso-e2e/busybox:v1
    command: [sh, -c, 'trap "exit 0" TERM; echo hello-sidecar running image \$(cat /etc/image-version); while true; do sleep 1; done']
---
apiVersion: v1
kind: Namespace
metadata: {name: $DEMO}
EOF
pass "SidecarSet created (v1beta1): the SidecarSet webhooks answered through the Service"
alpha=$(k get sidecarsets.v1alpha1.apps.kruise.io "$DEMO" -o jsonpath='{.apiVersion} {.spec.containers[0].name}')
[ "$alpha" = "apps.kruise.io/v1alpha1 hello-sidecar" ] || die "reading it as v1alpha1 (conversion webhook): $alpha"
pass "read as v1alpha1: the API server converted it through /convert on the Service"
# The operator's index follows SidecarSets through a watch: wait until a dry run is injected.
dry() { k -n "$DEMO" run probe --dry-run=server -o jsonpath='{.spec.containers[*].name}' --image=localhost/sso-e2e/busybox:v1 --labels=app=$DEMO; }
for i in $(seq 60); do
  dry 2>/dev/null | grep -q hello-sidecar && break
  [ "$i" != 60 ] || die "a dry-run pod in $DEMO is not injected after 30 s: $(dry 2>&1)"
  sleep 0.5
done
podspec() { node_pod "$1" "$DEMO" "$DEMO"; }
check_injected_pod() { # POD: created, injected, the sidecar runs and logs its line
  podspec "$1" | k apply -f - >/dev/null
  k -n "$DEMO" wait --for=condition=Ready "pod/$1" --timeout=60s >/dev/null || die "pod $1 not Ready"
  local names line
  names=$(k -n "$DEMO" get pod "$1" -o jsonpath='{.spec.containers[*].name}')
  [ "$names" = "hello-sidecar app" ] || die "pod $1 containers: $names"
  line=$(k -n "$DEMO" logs "$1" -c hello-sidecar)
  [ "$line" = "hello-sidecar running image v1" ] || die "the sidecar of $1 logged '$line'"
  pass "pod $1 injected; its sidecar runs on the real node and logs: $line"
}
check_injected_pod hello-1
hack/node.sh status 2>&1 | grep 'RSS:' | sed 's/^\[node\]   /[e2e-node] memory with the operator installed: /' >&2 || true

# ---------------------------------------------------------------------------------------------
section "rollout: in-place upgrades on the real kubelet (crates/e2e/tests/real_node.rs)"
filter=()
[ -z "${SSO_E2E_NODE_FILTER:-}" ] || filter=("$SSO_E2E_NODE_FILTER")
if [ "${SSO_E2E_SKIP_ROLLOUT:-0}" = 1 ]; then
  log "SSO_E2E_SKIP_ROLLOUT=1: the rollout tests are left out"
else
  # (The policy's HotUpgrade test runs in the policy section, with the operator in auto mode.)
  hack/node.sh exec cargo test --offline -p sidecarset-e2e --test real_node -- --ignored --nocapture \
    --test-threads="${SSO_E2E_NODE_THREADS:-3}" --skip hot_upgrade_of_pods_the_policy_injected "${filter[@]}"
fi

hack/node.sh status 2>&1 | grep 'RSS:' | sed 's/^\[node\]   /[e2e-node] memory after the rollout tests: /' >&2 || true

# ---------------------------------------------------------------------------------------------
section "upgrade: helm upgrade"
secret_before=$(k -n "$NS" get secret "$RELEASE-webhook-certs" -o jsonpath='{.data}' | sha256sum)
# Pods admitted from several clients at once while the upgrade replaces every replica
# (hack/admissions.py: server-side dry runs, each through the pod webhook, failurePolicy Fail, as
# a real create): how many were attempted, and how many refused or admitted without the sidecar.
ADM=$WORK/upgrade-admissions
: >"$WORK/upgrade-admissions.txt"
# admissions_start NAME / admissions_stop NAME: the load around a disruption; stop prints the
# result, records it and fails on any failed admission.
admissions_start() {
  rm -f "$ADM.$1".*
  hack/node.sh exec python3 hack/admissions.py --namespace "$DEMO" --labels "app=$DEMO" --expect hello-sidecar \
    --stop "$ADM.$1.stop" --failures "$ADM.$1.failures" --clients "${SSO_E2E_ADMISSION_CLIENTS:-4}" \
    --rate "${SSO_E2E_ADMISSION_RATE:-80}" >"$ADM.$1.json" 2>"$ADM.$1.err" &
  ADM_PID=$!
  sleep 2
}
admissions_stop() {
  local what=$1 n bad rate
  sleep 5
  touch "$ADM.$what.stop"
  wait "$ADM_PID" || { cat "$ADM.$what.err" >&2; die "hack/admissions.py failed"; }
  read -r n bad rate < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["attempted"], d["failed"], d["rate"])' "$ADM.$what.json")
  log "admissions during the $what: $n attempted, $bad failed (${SSO_E2E_ADMISSION_CLIENTS:-4} clients, $rate/s)"
  echo "$what admissions: $n attempted, $bad failed (${SSO_E2E_ADMISSION_CLIENTS:-4} clients, $rate/s; shutdownDelaySeconds ${SSO_E2E_SHUTDOWN_DELAY:-default})" >>"$WORK/upgrade-admissions.txt"
  [ "$n" -gt 100 ] || die "only $n admissions were attempted during the $what: the load did not run (see $ADM.$what.err)"
  if [ "$bad" != 0 ]; then
    sed 's/^/      /' "$ADM.$what.failures" | head -n 20 >&2
    if [ "${SSO_E2E_UPGRADE_FAILURES_OK:-0}" = 1 ]; then
      log "WARNING: $bad of $n admissions failed during the $what (SSO_E2E_UPGRADE_FAILURES_OK=1)"
    else
      die "$bad of $n admissions failed during the $what (the replicas' shutdown is not graceful enough)"
    fi
  else
    pass "$n pod admissions during the $what ($rate/s from ${SSO_E2E_ADMISSION_CLIENTS:-4} clients), 0 failed"
  fi
}
admissions_start upgrade
t=$SECONDS
helm upgrade "$RELEASE" charts/sidecarset-operator -n "$NS" -f "$VALUES" --set logFormat=text --set replicaCount=3 --wait --timeout 3m >/dev/null
pass "helm upgrade --wait (logFormat=text, replicaCount=3): done in $((SECONDS - t)) s"
admissions_stop upgrade
[ "$(k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = "$ca_m" ] || die "helm upgrade changed the caBundle the operator wrote"
[ "$(k -n "$NS" get secret "$RELEASE-webhook-certs" -o jsonpath='{.data}' | sha256sum)" = "$secret_before" ] || die "the certificate Secret changed"
pass "caBundle and certificate Secret unchanged"
args=$(k -n "$NS" get deploy "$RELEASE" -o jsonpath='{.spec.template.spec.containers[0].args}')
case $args in *--log-format=text*) ;; *) die "the new value is not applied: $args" ;; esac
[ "$(jp -n "$NS" get deploy "$RELEASE" -o jsonpath='{.status.readyReplicas}/{.status.updatedReplicas}')" = 3/3 ] || die "not 3 updated ready replicas"
pass "new values applied: 3 replicas with --log-format=text, all ready"
check_injected_pod hello-2

# ---------------------------------------------------------------------------------------------
section "drain: every replica evicted, the PodDisruptionBudget in place"
# As kubectl drain evicts a node's pods (all at once, each retried while its PDB refuses), with
# admissions running. There is one node, so the replacements land on it again (drain would
# cordon it first and they would go elsewhere: for the webhook the same).
for i in $(seq 120); do # the upgrade's last old replica may still be finishing its shutdown
  old_pods=$(k -n "$NS" get pods -l "$OPERATOR_PODS" -o jsonpath='{.items[*].metadata.name}')
  [ "$(wc -w <<<"$old_pods")" = 3 ] && break
  [ "$i" != 120 ] || die "expected 3 operator pods before the drain: $old_pods"
  sleep 0.5
done
printf '{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "%s", "namespace": "%s"}}\n' POD "$NS" >"$ADM.eviction.tmpl"
admissions_start drain
t=$SECONDS
evict() { # POD: until evicted (or gone), retried while the PDB refuses
  local p=$1 out
  sed "s/POD/$p/" "$ADM.eviction.tmpl" >"$ADM.eviction.$p.json"
  until out=$(k create --raw "/api/v1/namespaces/$NS/pods/$p/eviction" -f "$ADM.eviction.$p.json" 2>&1); do
    case $out in
      *NotFound* | *"not found"*) return 0 ;;
      *"disruption budget"* | *TooManyRequests* | *429*) echo "$p" >>"$ADM.drain.refusals"; sleep 1 ;;
      *) echo "evicting $p: $out" >&2; return 1 ;;
    esac
    [ $((SECONDS - t)) -lt 120 ] || { echo "evicting $p: still refused after 120 s" >&2; return 1; }
  done
}
evict_pids=()
for p in $old_pods; do evict "$p" & evict_pids+=($!); done
for j in "${evict_pids[@]}"; do wait "$j" || die "an eviction failed (see above)"; done
refused=0
[ ! -e "$ADM.drain.refusals" ] || refused=$(wc -l <"$ADM.drain.refusals")
ready3() { [ "$(jp -n "$NS" get deploy "$RELEASE" -o jsonpath='{.status.readyReplicas}/{.status.replicas}')" = 3/3 ]; }
for i in $(seq 120); do ready3 && break; [ "$i" != 120 ] || die "the Deployment is not 3/3 ready 60 s after the evictions"; sleep 0.5; done
pass "3 replicas evicted in $((SECONDS - t)) s (the PodDisruptionBudget refused $refused attempts meanwhile), 3 new ones ready"
admissions_stop drain

# ---------------------------------------------------------------------------------------------
section "injection in the API server: features.injection=auto, every replica stopped"
# The SidecarSet compiled into a MutatingAdmissionPolicy: with the Deployment scaled to 0, a pod
# it selects is created on the real node with its sidecar by the API server (nothing refused);
# the sidecar is then upgraded in place on the kubelet like any other, and webhook mode removes
# the policy again.
t=$SECONDS
helm upgrade "$RELEASE" charts/sidecarset-operator -n "$NS" -f "$VALUES" --set replicaCount=3 \
  --set features.injection=auto --wait --timeout 3m >/dev/null || die "helm upgrade --set features.injection=auto failed"
policy_part() { # "TOKEN PROBE-LABELS" of this release's policy part that injects SidecarSet $1
  k get mutatingadmissionpolicy -o json 2>/dev/null | python3 -c '
import json, sys
release, ss = sys.argv[1], sys.argv[2]
for p in json.load(sys.stdin)["items"]:
    name, a = p["metadata"]["name"], p["metadata"].get("annotations") or {}
    if name != release and not name.startswith(release + "-"):
        continue
    if ss in a.get("sidecarset-operator.io/part-injects", "").split(","):
        labels = json.loads(a.get("sidecarset-operator.io/probe-labels", "{}"))
        print(a.get("sidecarset-operator.io/policy-token", ""), ",".join(k + "=" + v for k, v in labels.items()))
' "$RELEASE" "$1" || true
}
probe_token() { # the token a dry-run probe pod with labels $1 gets in the operator's namespace
  [ -n "$1" ] || return 0
  k -n "$NS" run policy-probe --dry-run=server --image=localhost/sso-e2e/busybox:v1 \
    --labels="$1" -o jsonpath='{.metadata.annotations.sidecarset-operator\.io/policy-token}' 2>/dev/null || true
}
for i in $(seq 240); do
  # The part of the policy that injects the SidecarSet (SidecarSets that never select one pod
  # are in parts of their own), probed with the labels its binding lets through.
  token='' labels=''
  read -r token labels < <(policy_part "$DEMO") || true
  here=$(k get mutatingadmissionpolicy "$RELEASE" -o jsonpath='{.metadata.annotations.sidecarset-operator\.io/injected-here}' 2>/dev/null || true)
  cond=$(k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[?(@.name=="mpod.sidecarset-operator.io")].matchConditions[*].expression}' 2>/dev/null || true)
  # Narrowed: every term of the condition that selects the SidecarSet's pods also leaves out
  # those that record it (a replica of the previous release may have widened it meanwhile; the
  # leader narrows it again within a minute).
  # (Each such term names it twice: its selector and the injected list; a plain selector once.)
  # (grep exits 1 when it finds none: counted apart from the pipeline, which pipefail would end.)
  named=$({ grep -o "'$DEMO'" <<<"$cond" || true; } | wc -l)
  leaving=$({ grep -o "'$DEMO' in object.metadata.annotations" <<<"$cond" || true; } | wc -l)
  if [ -n "$token" ] && [ "$(probe_token "$labels")" = "$token" ] && [[ ",$here," == *",$DEMO,"* ]] \
    && [ "$leaving" -gt 0 ] && [ "$named" = $((2 * leaving)) ]; then break; fi
  [ "$i" != 240 ] || die "the policy is not in effect or the condition not narrowed 120 s after the upgrade (token '$token', SidecarSets '$here', condition: $cond)"
  sleep 0.5
done
pass "policy $RELEASE in effect (token $token, holds $DEMO), the pod webhook's condition narrowed ($((SECONDS - t)) s)"
k -n "$NS" scale deploy "$RELEASE" --replicas=0 >/dev/null
for i in $(seq 120); do
  [ -z "$(k -n "$NS" get pods -l "$OPERATOR_PODS" -o name)" ] && break
  [ "$i" != 120 ] || die "operator pods still there 60 s after scaling to 0"
  sleep 0.5
done
pass "every replica stopped (Deployment scaled to 0)"
check_injected_pod policy-1
node_pod policy-plain "$DEMO" other | k apply -f - >/dev/null || die "a pod no SidecarSet selects was refused"
[ "$(k -n "$DEMO" get pod policy-plain -o jsonpath='{.spec.containers[*].name}')" = app ] || die "policy-plain was changed"
pass "a pod no SidecarSet selects created as it was, with every replica stopped"
k -n "$NS" scale deploy "$RELEASE" --replicas=3 >/dev/null
k -n "$NS" rollout status deploy "$RELEASE" --timeout=120s >/dev/null || die "the operator did not come back"
# In place on the kubelet: the SidecarSet's image changed, the policy-injected pod's sidecar
# restarts on the new image (the pod and its app container stay).
uid=$(k -n "$DEMO" get pod policy-1 -o jsonpath='{.metadata.uid}')
# (The replicas just came back: their EndpointSlice may lag the Deployment's status a moment.)
for i in $(seq 60); do
  k patch sidecarsets.v1beta1.apps.kruise.io "$DEMO" --type=json \
    -p '[{"op": "replace", "path": "/spec/containers/0/image", "value": "localhost/sso-e2e/busybox:v2"}]' \
    >/dev/null 2>"$WORK/patch.err" && break
  [ "$i" != 60 ] || die "the image change of $DEMO was refused for 30 s: $(cat "$WORK/patch.err")"
  sleep 0.5
done
for i in $(seq 180); do
  line=$(k -n "$DEMO" logs policy-1 -c hello-sidecar 2>/dev/null | tail -n 1)
  [ "$line" = "hello-sidecar running image v2" ] && break
  [ "$i" != 180 ] || die "policy-1's sidecar still logs '$line' 90 s after the image change"
  sleep 0.5
done
[ "$(k -n "$DEMO" get pod policy-1 -o jsonpath='{.metadata.uid}')" = "$uid" ] || die "policy-1 was recreated"
pass "policy-1 (injected by the policy) upgraded in place on the kubelet: its sidecar logs '$line', same pod"
# HotUpgrade on the kubelet for pods the policy injected (crates/e2e/tests/real_node.rs): the test
# stops every replica, creates the pods, brings the replicas back and hands v1 over to v2.
SSO_E2E_POLICY_OPERATOR="$NS/$RELEASE" hack/node.sh exec cargo test --offline -p sidecarset-e2e --test real_node -- \
  --ignored --nocapture --exact hot_upgrade_of_pods_the_policy_injected >"$WORK/policy-hot.log" 2>&1 \
  || { tail -n 40 "$WORK/policy-hot.log" >&2; die "HotUpgrade of pods the policy injected failed"; }
pass "HotUpgrade of pods the policy injected: $(grep -o 'hot upgrade v1 -> v2 of .*' "$WORK/policy-hot.log")"
helm upgrade "$RELEASE" charts/sidecarset-operator -n "$NS" -f "$VALUES" --set replicaCount=3 --wait --timeout 3m >/dev/null \
  || die "helm upgrade back to webhook mode failed"
for i in $(seq 120); do
  # Every part: the first and those named after it.
  left=$(k get mutatingadmissionpolicy -o name 2>/dev/null | grep -E "/$RELEASE(-[0-9]+)?\$" || true)
  [ -z "$left" ] && break
  [ "$i" != 120 ] || die "the policy is still there 60 s after webhook mode came back: $left"
  sleep 0.5
done
pass "back in webhook mode: the policy removed ($((SECONDS - t)) s for the whole section)"

# ---------------------------------------------------------------------------------------------
section "uninstall: helm uninstall"
helm uninstall "$RELEASE" -n "$NS" --wait >/dev/null
for o in "deploy/$RELEASE" "svc/$RELEASE-webhook" "pdb/$RELEASE" "sa/$RELEASE" "role/$RELEASE"; do
  [ -z "$(jp -n "$NS" get "$o" -o name)" ] || die "$o is left after uninstall"
done
for o in "mutatingwebhookconfiguration/$RELEASE" "validatingwebhookconfiguration/$RELEASE" "clusterrole/$RELEASE"; do
  [ -z "$(jp get "$o" -o name)" ] || die "$o is left after uninstall"
done
pass "the chart's objects are gone"
k get crd "$CRD" >/dev/null || die "the CRD was deleted"
k get sidecarsets.v1beta1.apps.kruise.io "$DEMO" >/dev/null || die "the SidecarSet $DEMO was deleted"
k -n "$NS" get secret "$RELEASE-webhook-certs" >/dev/null || die "the certificate Secret was deleted"
k -n "$NS" get lease "$RELEASE" >/dev/null || die "the Lease was deleted"
[ "$(k -n "$DEMO" get pod hello-1 -o jsonpath='{.spec.containers[*].name}')" = "hello-sidecar app" ] || die "pod hello-1 lost its sidecar"
pass "kept: the CRD, SidecarSet $DEMO (v1beta1), the certificate Secret, the Lease, the injected pods"
podspec hello-3 | k apply -f - >/dev/null
[ "$(k -n "$DEMO" get pod hello-3 -o jsonpath='{.spec.containers[*].name}')" = app ] || die "a pod created after uninstall was injected"
pass "a pod created after uninstall is not injected (no webhook)"

log "real-node suites passed in $((SECONDS - START)) s"
