#!/usr/bin/env bash
# The OLM e2e (`make e2e-olm`): the bundle installed, upgraded and removed by OLM itself, on the
# real node of hack/node.sh, with nothing from outside the machine:
#
#   - OLM v0 (olm-operator + catalog-operator built from its Go module, hack/olm.sh) against the
#     node's control plane; a registry in the node's network namespace (hack/registry.sh) that the
#     node's containerd pulls from over plain HTTP (hack/node.sh registry);
#   - the operator's image (hack/images.sh, from the dev binary) pushed there as :0.1.0 and :0.2.0;
#     two bundles rendered from the chart and the code as `make bundle` does (hack/bundle.sh render:
#     the same generator, only the image and the version differ; 0.2.0 replaces 0.1.0), built into
#     bundle images (hack/images.sh bundle) and pushed; a file-based catalog made by `opm init` and
#     `opm render` of the pushed bundle images (so each entry's image is the bundle image and OLM
#     runs its bundle unpack Job on the node), served by `opm serve` as a CatalogSource (spec.address);
#   - control: a labelled probe pod before the install gets no sidecar;
#   - install: OperatorGroup (AllNamespaces) + Subscription in sidecarset-system; the unpack Job ran
#     on the real node and completed, the InstallPlan is Complete, the CSV Succeeded, the CSV's
#     Deployment Available with its pods on the real node (image pulled from the registry), OLM's
#     webhook configurations (random names, owned by the CSV) and the CRD's conversion carry OLM's
#     CA, which signed the certificate the pods serve;
#   - blast radius: the operator keeps the pod webhook's matchConditions on OLM's configuration
#     (found by label) and OLM leaves them there;
#   - a SidecarSet; a pod on the real node gets its sidecar and is Ready; an image change upgrades
#     it in place;
#   - upgrade: the catalog gains 0.2.0; OLM replaces the CSV while pods are created in a loop
#     (server-side dry runs through the pod webhook): 0 refused, 0 without the sidecar;
#   - removal: Subscription and CSV deleted: the Deployment and the webhook configurations go, the
#     SidecarSet and the pods stay; a new probe pod gets no sidecar.
#
# Env: SSO_WORK (default <repo>/.local), SSO_KEEP_NODE=1 (leave node, OLM and registry running),
# SSO_TIMEOUT_OLM (seconds for each OLM step, default 600). Needs what hack/node.sh needs (root, Linux).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK
mkdir -p "$WORK"
W=$WORK/e2e-olm
NS=sidecarset-system
PKG=sidecarset-operator
CATALOG=sso-catalog
DEMO=olm-demo
T_OLM=${SSO_TIMEOUT_OLM:-600}
START=$SECONDS

log() { printf '[e2e-olm] %s\n' "$*" >&2; }
die() { printf '\n[e2e-olm] FAILED: %s\n\n' "$*" >&2; exit 1; }
pass() { printf '[e2e-olm]   ok  %s\n' "$*" >&2; }
section() { printf '\n[e2e-olm] ==== %s (%d s)\n' "$*" "$((SECONDS - START))" >&2; }
figure() { printf '%s\n' "$*" >>"$W/figures.txt"; log "figure: $*"; }

if ! why=$(hack/node.sh check 2>&1); then
  printf '%s\n' "$why" >&2
  if [ "${SSO_REQUIRE_REAL_NODE:-}" = 1 ] || { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && [ "${SSO_REQUIRE_REAL_NODE:-}" != 0 ]; }; then
    die "the OLM e2e must run here, but this machine cannot run the real node (see above)"
  fi
  log "SKIPPED the OLM e2e: this machine cannot run the real node"
  exit 0
fi

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -n "${KUBECTL:-}" ]; then
    log "failed; state for the record:"
    k get csv,installplan,subscription -A 2>&1 | sed 's/^/      /' >&2 || true
    k -n "$NS" logs -l app.kubernetes.io/name=sidecarset-operator --tail=20 --prefix 2>&1 | sed 's/^/      /' >&2 || true
    tail -n 15 "$WORK/olm/logs/olm.log" "$WORK/olm/logs/catalog.log" 2>/dev/null | sed 's/^/      /' >&2 || true
  fi
  [ -n "${LOOP_PID:-}" ] && { touch "$W/loop.stop"; wait "$LOOP_PID" 2>/dev/null || true; }
  [ -z "${LOGS_PID:-}" ] || kill "$LOGS_PID" 2>/dev/null || true
  if [ "${SSO_KEEP_NODE:-0}" = 1 ]; then
    log "SSO_KEEP_NODE=1: node, OLM and registry keep running (hack/olm.sh down; hack/node.sh down)"
  else
    hack/olm.sh down || true
    hack/registry.sh down || true
    hack/node.sh down || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$W"
mkdir -p "$W"

section "build: the operator binary (dev profile, as the real-node suites), OLM's tools"
t=$SECONDS
cargo build --bin sidecarset-operator
BIN=$REPO/target/debug/sidecarset-operator
eval "$(hack/tools.sh olm crane)"
log "binary and tools ready in $((SECONDS - t)) s"

section "node, registry, OLM"
t=$SECONDS
hack/node.sh up
figure "node up: $((SECONDS - t)) s"
eval "$(hack/node.sh env)"
KUBECTL=$SSO_NODE_KUBECTL
k() { hack/node.sh exec "$KUBECTL" --request-timeout=20s "$@"; }
jp() { k "$@" 2>/dev/null || true; }
t=$SECONDS
eval "$(hack/olm.sh up)"
figure "OLM up (registry, toolbox image, CRDs, olm-operator, catalog-operator): $((SECONDS - t)) s"
REG=$SSO_REGISTRY
OPM=$OLM_BIN/opm

section "images and catalog: operator 0.1.0 and 0.2.0, their bundles, a file-based catalog"
t=$SECONDS
for v in 0.1.0 0.2.0; do
  SSO_OPERATOR_IMAGE=localhost/sidecarset-operator:$v SSO_IMAGE_VERSION=$v hack/images.sh operator "$BIN" "$W/img-$v"
  hack/olm.sh push "$W/img-$v/operator.tar" "$REG/sidecarset-operator:$v"
  replaces=""
  [ "$v" = 0.1.0 ] || replaces=0.1.0
  VERSION=$v OPERATOR_IMAGE=$REG/sidecarset-operator:$v BUNDLE_REPLACES=$replaces BUNDLE_CHANNELS=stable \
    hack/bundle.sh render "$W/bundle-$v"
  hack/images.sh bundle "$W/bundle-$v" "localhost/sidecarset-operator-bundle:v$v" "$W/bundle-$v.tar"
  hack/olm.sh push "$W/bundle-$v.tar" "$REG/sidecarset-operator-bundle:v$v"
done
# The catalog: opm renders the bundle images as pulled from the registry (their labels and
# content); the entries' image is the bundle image, so OLM unpacks it on the node.
catalog() { # DIR VERSION...
  local dir=$1 v prev=""
  shift
  mkdir -p "$dir"
  "$OPM" init "$PKG" --default-channel=stable -o yaml >"$dir/index.yaml"
  for v in "$@"; do
    hack/node.sh exec "$OPM" render --use-http "$REG/sidecarset-operator-bundle:v$v" -o yaml >>"$dir/index.yaml"
  done
  { printf -- '---\nschema: olm.channel\npackage: %s\nname: stable\nentries:\n' "$PKG"
    for v in "$@"; do
      printf -- '- name: %s.v%s\n' "$PKG" "$v"
      [ -z "$prev" ] || printf '  replaces: %s.v%s\n' "$PKG" "$prev"
      prev=$v
    done; } >>"$dir/index.yaml"
  "$OPM" validate "$dir"
}
catalog "$W/catalog-1" 0.1.0
catalog "$W/catalog-2" 0.1.0 0.2.0
img=$(python3 -c 'import sys,yaml; print([d["image"] for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("schema")=="olm.bundle"][0])' "$W/catalog-1/index.yaml")
[ "$img" = "$REG/sidecarset-operator-bundle:v0.1.0" ] || die "the catalog's bundle image is '$img', not the pushed bundle image"
figure "images, bundles, catalogs: $((SECONDS - t)) s"
pass "operator images, bundle images 0.1.0 and 0.2.0 (replaces 0.1.0) pushed to $REG; catalog entries point at the bundle images"

section "control: a labelled probe pod before the install"
k create namespace "$DEMO" >/dev/null
podspec() { # NAME [IMAGE]
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $DEMO, labels: {app: $DEMO}}
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
podspec probe-before | k apply -f - >/dev/null
[ "$(k -n "$DEMO" get pod probe-before -o jsonpath='{.spec.containers[*].name}')" = app ] || die "the probe pod has containers other than app before the install"
pass "probe pod before the install: containers 'app' only"

section "install through OLM: CatalogSource, OperatorGroup, Subscription"
t=$SECONDS
hack/olm.sh catalog "$CATALOG" "$W/catalog-1"
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata: {name: $PKG, namespace: $NS}
spec: {}
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata: {name: $PKG, namespace: $NS}
spec:
  name: $PKG
  channel: stable
  source: $CATALOG
  sourceNamespace: olm
  installPlanApproval: Automatic
  config:
    nodeSelector: {kubernetes.io/hostname: $SSO_E2E_REAL_NODE}
    tolerations: [{key: sidecarset-operator.io/real-node, operator: Exists, effect: NoSchedule}]
EOF
CSV1=$PKG.v0.1.0
deadline=$((SECONDS + T_OLM))
until [ "$(jp -n "$NS" get csv "$CSV1" -o jsonpath='{.status.phase}')" = Succeeded ]; do
  ((SECONDS < deadline)) || die "CSV $CSV1 not Succeeded after ${T_OLM}s: $(jp -n "$NS" get csv "$CSV1" -o jsonpath='{.status.phase} {.status.reason} {.status.message}') / subscription: $(jp -n "$NS" get subscription "$PKG" -o jsonpath='{.status.conditions}')"
  sleep 1
done
figure "install: Subscription to CSV Succeeded: $((SECONDS - t)) s"
pass "CSV $CSV1 Succeeded"
ip=$(k -n "$NS" get subscription "$PKG" -o jsonpath='{.status.installPlanRef.name}')
[ "$(k -n "$NS" get installplan "$ip" -o jsonpath='{.status.phase}')" = Complete ] || die "InstallPlan $ip is not Complete"
pass "InstallPlan $ip Complete"
# The bundle unpack Job: in the catalog's namespace, completed, its pod ran on the real node.
jobs=$(k -n olm get jobs -o jsonpath='{range .items[*]}{.metadata.name} {.status.succeeded}{"\n"}{end}')
job=$(awk '$2 == 1 { print $1; exit }' <<<"$jobs")
[ -n "$job" ] || die "no completed bundle unpack Job in namespace olm: $jobs"
unpack_nodes=$(k -n olm get pods -l job-name="$job" -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.phase}{"\n"}{end}')
grep -q "^$SSO_E2E_REAL_NODE Succeeded$" <<<"$unpack_nodes" || die "the unpack Job $job's pod did not succeed on $SSO_E2E_REAL_NODE: $unpack_nodes"
cm_bundle=$(k -n olm get job "$job" -o jsonpath='{.spec.template.spec.initContainers[?(@.name=="pull")].image}')
[ "$cm_bundle" = "$REG/sidecarset-operator-bundle:v0.1.0" ] || die "the unpack Job pulled '$cm_bundle'"
pass "bundle unpack Job $job completed on $SSO_E2E_REAL_NODE (pulled $cm_bundle from the registry)"
# The Deployment: owned by the CSV, Available, pods on the real node, image from the registry.
dep=$(k -n "$NS" get deploy -l olm.owner="$CSV1" -o jsonpath='{.items[*].metadata.name}')
[ "$dep" = "$PKG" ] || die "Deployments owned by $CSV1: '$dep'"
k -n "$NS" wait --for=condition=Available "deploy/$dep" --timeout=120s >/dev/null || die "Deployment $dep not Available"
pods=$(k -n "$NS" get pods -l app.kubernetes.io/name=sidecarset-operator -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].image} {.status.containerStatuses[0].imageID}{"\n"}{end}')
[ "$(grep -c "^$SSO_E2E_REAL_NODE true $REG/sidecarset-operator:0.1.0 " <<<"$pods")" = 2 ] || die "expected 2 ready operator pods on $SSO_E2E_REAL_NODE with image $REG/sidecarset-operator:0.1.0: $pods"
pass "Deployment $dep (olm.owner=$CSV1) Available; 2 pods ready on $SSO_E2E_REAL_NODE, image pulled from $REG"
# OLM's certificate: Secret <deployment>-service-cert; the webhook configurations (random names,
# labelled with the CSV) and the CRD's conversion trust its CA, which signed what the pods serve.
k -n "$NS" get secret "$dep-service-cert" -o jsonpath='{.data.tls\.crt}' | base64 -d >"$W/olm-tls.crt"
mwcs=$(k get mutatingwebhookconfigurations -l olm.owner="$CSV1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
vwcs=$(k get validatingwebhookconfigurations -l olm.owner="$CSV1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
{ [ "$(wc -l <<<"$mwcs")" = 3 ] && [ "$(wc -l <<<"$vwcs")" = 1 ]; } || die "webhook configurations owned by $CSV1: mutating '$mwcs', validating '$vwcs'"
for c in $mwcs; do
  case $c in mpod.sidecarset-operator.io-*|mpod-update.sidecarset-operator.io-*|msidecarset.sidecarset-operator.io-*) ;; *) die "unexpected mutating configuration $c" ;; esac
done
log "OLM's webhook configurations: $(tr '\n' ' ' <<<"$mwcs"$'\n'"$vwcs")"
# OLM may still be writing a new CA into them (it can make a second CA right after the CSV
# reports Succeeded, and writes the configurations and the CRD one after the other): wait for
# one caBundle everywhere that verifies the Secret's certificate.
t=$SECONDS
for i in $(seq 60); do
  k -n "$NS" get secret "$dep-service-cert" -o jsonpath='{.data.tls\.crt}' | base64 -d >"$W/olm-tls.crt"
  cas=$( { for c in $mwcs; do k get mutatingwebhookconfiguration "$c" -o jsonpath='{.webhooks[0].clientConfig.caBundle}{"\n"}'; done
           k get validatingwebhookconfiguration "$vwcs" -o jsonpath='{.webhooks[0].clientConfig.caBundle}{"\n"}'
           k get crd sidecarsets.apps.kruise.io -o jsonpath='{.spec.conversion.webhook.clientConfig.caBundle}{"\n"}'; } | sort -u)
  if [ "$(wc -l <<<"$cas")" = 1 ] && [ -n "$cas" ]; then
    base64 -d <<<"$cas" >"$W/olm-ca.crt"
    openssl verify -CAfile "$W/olm-ca.crt" "$W/olm-tls.crt" >/dev/null 2>&1 && break
  fi
  [ "$i" != 60 ] || die "after 60 s the webhook configurations and the CRD do not carry one caBundle verifying $dep-service-cert ($(wc -l <<<"$cas") different)"
  sleep 1
done
[ $((SECONDS - t)) -le 1 ] || figure "install: one caBundle everywhere only $((SECONDS - t)) s after the CSV Succeeded"
conv=$(k get crd sidecarsets.apps.kruise.io -o jsonpath='{.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name}:{.spec.conversion.webhook.clientConfig.service.port}{.spec.conversion.webhook.clientConfig.service.path}')
[ "$conv" = "$NS/$dep-service:9443/convert" ] || [ "$conv" = "$NS/$dep-service:443/convert" ] || die "CRD conversion: $conv"
# The certificate a pod serves is OLM's (files mode at OLM's mount path).
pod_ip=$(k -n "$NS" get pods -l app.kubernetes.io/name=sidecarset-operator -o jsonpath='{.items[0].status.podIP}')
served=$(hack/node.sh exec bash -c "openssl s_client -connect $pod_ip:9443 </dev/null 2>/dev/null | openssl x509 -outform PEM" | openssl x509 -noout -fingerprint -sha256)
[ "$served" = "$(openssl x509 -in "$W/olm-tls.crt" -noout -fingerprint -sha256)" ] || die "the pod at $pod_ip serves another certificate than $dep-service-cert: $served"
pass "one caBundle (OLM's CA) on 4 webhook configurations and the CRD's conversion ($conv); it verifies $dep-service-cert, which the pods serve"

section "the pod webhook's blast radius under OLM"
mpod=$(grep '^mpod.sidecarset-operator.io-' <<<"$mwcs")
mpod_policy=$(k get mutatingwebhookconfiguration "$mpod" -o jsonpath='{.webhooks[0].failurePolicy} {.webhooks[0].objectSelector.matchExpressions[0].key} {.webhooks[0].namespaceSelector}')
log "pod CREATE webhook $mpod: failurePolicy, objectSelector key, namespaceSelector: $mpod_policy"

section "a SidecarSet; a pod on the real node gets its sidecar; an image change upgrades it in place"
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
EOF
pass "SidecarSet $DEMO created through OLM's SidecarSet webhooks"
[ "$(k get sidecarsets.v1alpha1.apps.kruise.io "$DEMO" -o jsonpath='{.apiVersion}')" = apps.kruise.io/v1alpha1 ] || die "reading it as v1alpha1 (OLM's conversion settings) failed"
pass "read as v1alpha1 through the conversion webhook OLM configured"
dry() { k -n "$DEMO" run probe --dry-run=server -o jsonpath='{.spec.containers[*].name}' --image=localhost/sso-e2e/busybox:v1 --labels=app=$DEMO; }
for i in $(seq 60); do
  dry 2>/dev/null | grep -q hello-sidecar && break
  [ "$i" != 60 ] || die "a dry-run pod in $DEMO is not injected after 30 s: $(dry 2>&1)"
  sleep 0.5
done
# The match condition the operator keeps on OLM's configuration (found by label).
mc=""
for i in $(seq 60); do
  mc=$(jp get mutatingwebhookconfiguration "$mpod" -o jsonpath='{.webhooks[0].matchConditions[0].expression}')
  [ -n "$mc" ] && grep -q "$DEMO" <<<"$mc" && break
  [ "$i" != 60 ] || die "the operator did not put a match condition for the SidecarSet on $mpod within 60 s: '$mc'"
  sleep 1
done
pass "the operator keeps the pod webhook's matchConditions on OLM's $mpod: $mc"
podspec hello-1 | k apply -f - >/dev/null
k -n "$DEMO" wait --for=condition=Ready pod/hello-1 --timeout=90s >/dev/null || die "pod hello-1 not Ready"
[ "$(k -n "$DEMO" get pod hello-1 -o jsonpath='{.spec.containers[*].name}')" = "hello-sidecar app" ] || die "pod hello-1 containers: $(k -n "$DEMO" get pod hello-1 -o jsonpath='{.spec.containers[*].name}')"
line=$(k -n "$DEMO" logs hello-1 -c hello-sidecar)
[ "$line" = "hello-sidecar running image v1" ] || die "the sidecar of hello-1 logged '$line'"
uid=$(k -n "$DEMO" get pod hello-1 -o jsonpath='{.metadata.uid}')
pass "pod hello-1 injected, Ready on the real node; its sidecar logs: $line"
k patch sidecarset "$DEMO" --type=json -p '[{"op": "replace", "path": "/spec/containers/0/image", "value": "localhost/sso-e2e/busybox:v2"}]' >/dev/null
for i in $(seq 120); do
  st=$(jp -n "$DEMO" get pod hello-1 -o jsonpath='{.metadata.uid} {.status.containerStatuses[?(@.name=="hello-sidecar")].image} {.status.containerStatuses[?(@.name=="hello-sidecar")].ready}')
  [ "$st" = "$uid localhost/sso-e2e/busybox:v2 true" ] && break
  [ "$i" != 120 ] || die "hello-1 was not upgraded in place to v2 within 120 s: $st"
  sleep 1
done
line=$(k -n "$DEMO" logs hello-1 -c hello-sidecar)
[ "$line" = "hello-sidecar running image v2" ] || die "after the upgrade the sidecar logged '$line'"
pass "image change: hello-1 upgraded in place (same UID), its sidecar now logs: $line"

section "OLM leaves the match condition alone (olm-operator restarted: it resyncs every CSV)"
kill "$(cat "$WORK/olm/pids/olm.pid")"
for i in $(seq 50); do kill -0 "$(cat "$WORK/olm/pids/olm.pid")" 2>/dev/null || break; sleep 0.2; done
rm -f "$WORK/olm/pids/olm.pid"
hack/olm.sh up >/dev/null
sleep 20
[ "$(jp -n "$NS" get csv "$CSV1" -o jsonpath='{.status.phase}')" = Succeeded ] || die "CSV $CSV1 left Succeeded after olm-operator restarted"
mc2=$(jp get mutatingwebhookconfiguration "$mpod" -o jsonpath='{.webhooks[0].matchConditions[0].expression}')
[ "$mc2" = "$mc" ] || die "the match condition changed after olm-operator's resync: '$mc2'"
pass "after olm-operator restarted and resynced: CSV still Succeeded, the match condition still there"

section "upgrade: the catalog gains 0.2.0 (replaces 0.1.0); pods created in a loop throughout"
rm -f "$W"/loop.*
(
  n=0 bad=0
  while [ ! -e "$W/loop.stop" ]; do
    n=$((n + 1))
    # Exactly one sidecar: while both CSVs' pod webhooks exist, the second sees the first's
    # injection and adds nothing.
    if out=$(dry 2>&1) && [ "$out" = "hello-sidecar probe" ]; then :; else
      bad=$((bad + 1)); printf '%s %s\n' "$(date -u +%H:%M:%S.%N)" "$out" >>"$W/loop.failures"
    fi
    echo "$n $bad" >"$W/loop.count"
  done
) &
LOOP_PID=$!
# The 0.1.0 replicas' logs through the upgrade (which certificate they serve when OLM switches CAs).
hack/node.sh exec "$KUBECTL" --request-timeout=0 -n "$NS" logs -f -l app.kubernetes.io/name=sidecarset-operator --prefix --tail=-1 \
  >"$W/upgrade-operator.log" 2>&1 &
LOGS_PID=$!
sleep 3
t=$SECONDS
hack/olm.sh catalog "$CATALOG" "$W/catalog-2"
CSV2=$PKG.v0.2.0
deadline=$((SECONDS + T_OLM))
until [ "$(jp -n "$NS" get csv "$CSV2" -o jsonpath='{.status.phase}')" = Succeeded ] && [ -z "$(jp -n "$NS" get csv "$CSV1" -o name)" ]; do
  ((SECONDS < deadline)) || die "CSV $CSV2 not Succeeded (or $CSV1 not gone) after ${T_OLM}s: $(jp -n "$NS" get csv -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.reason}; {end}')"
  sleep 1
done
figure "upgrade: catalog with 0.2.0 to CSV $CSV2 Succeeded and $CSV1 gone: $((SECONDS - t)) s"
# OLM may roll the Deployment twice (the new CSV, then its new CA's hash in the pod template):
# wait until exactly 2 pods, all of 0.2.0 and ready, are left.
for i in $(seq 180); do
  pods=$(k -n "$NS" get pods -l app.kubernetes.io/name=sidecarset-operator -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].image}{"\n"}{end}')
  [ "$(wc -l <<<"$pods")" = 2 ] && [ "$(grep -c "^$SSO_E2E_REAL_NODE true $REG/sidecarset-operator:0.2.0$" <<<"$pods")" = 2 ] && break
  [ "$i" != 180 ] || die "expected 2 ready pods of 0.2.0 within 180 s: $pods"
  sleep 1
done
figure "upgrade: until 2 ready pods of 0.2.0 only: $((SECONDS - t)) s; ReplicaSets of the Deployment now: $(k -n "$NS" get rs -o jsonpath='{.items[*].metadata.name}')"
sleep 5
touch "$W/loop.stop"
wait "$LOOP_PID" || true
LOOP_PID=
kill "$LOGS_PID" 2>/dev/null || true
LOGS_PID=
reloads=$(grep -c 'serving certificate reloaded: the pod webhook' "$W/upgrade-operator.log" || true)
figure "upgrade: replicas that switched certificates when the caBundle changed (log lines): $reloads"
read -r adm_n adm_bad <"$W/loop.count"
figure "upgrade admissions: $adm_n attempted, $adm_bad refused or without the sidecar"
# Why, from the API server's log (the pod webhook fails open: a failed call is a pod without
# its sidecar, not a refusal).
APISERVER_LOG=$SSO_WORK/node/cluster/kwok/clusters/sso-node/logs/kube-apiserver.log
if [ -s "$APISERVER_LOG" ]; then
  grep 'Failed calling webhook, failing open mpod.sidecarset-operator.io' "$APISERVER_LOG" \
    | sed -E 's/^.([0-9]{4}) ([0-9:.]{8}).*failed to call webhook: (Post "[^"]*": )?/\2 /' | cut -c1-160 >"$W/upgrade-webhook-errors.txt" || true
  [ ! -s "$W/upgrade-webhook-errors.txt" ] || { log "the API server failed open on the pod webhook:"; sed 's/^/      /' "$W/upgrade-webhook-errors.txt" >&2; }
fi
if [ "$adm_bad" != 0 ]; then
  sed 's/^/      /' "$W/loop.failures" | head -n 20 >&2
  if [ "${SSO_E2E_OLM_UPGRADE_FAILURES_OK:-0}" = 1 ]; then
    log "WARNING: $adm_bad of $adm_n pod admissions during the OLM upgrade were refused or not injected (SSO_E2E_OLM_UPGRADE_FAILURES_OK=1)"
  else
    die "$adm_bad of $adm_n pod admissions during the OLM upgrade were refused or not injected"
  fi
else
  pass "$adm_n pod admissions during the upgrade, 0 refused, 0 without the sidecar"
fi
[ -z "$(jp get mutatingwebhookconfigurations -l olm.owner="$CSV1" -o name)" ] || die "$CSV1's webhook configurations are left"
mpod2=$(k get mutatingwebhookconfigurations -l olm.owner="$CSV2",olm.webhook-description-generate-name=mpod.sidecarset-operator.io -o jsonpath='{.items[*].metadata.name}')
[ -n "$mpod2" ] || die "no pod webhook configuration owned by $CSV2"
for i in $(seq 90); do
  mc=$(jp get mutatingwebhookconfiguration "$mpod2" -o jsonpath='{.webhooks[0].matchConditions[0].expression}')
  [ -n "$mc" ] && break
  [ "$i" != 90 ] || die "no match condition on $mpod2 after the upgrade"
  sleep 1
done
pass "2 pods of 0.2.0 ready on the real node; $CSV1's webhook configurations gone; the match condition is on $CSV2's $mpod2"
[ "$(k -n "$DEMO" get pod hello-1 -o jsonpath='{.metadata.uid}')" = "$uid" ] || die "hello-1 was replaced"

section "removal: Subscription and CSV deleted"
hack/olm.sh status 2>&1 | sed 's/^\[olm\]   /[e2e-olm] memory: /' | tee -a "$W/figures.txt" >&2 || true
t=$SECONDS
k -n "$NS" delete subscription "$PKG" --wait=true >/dev/null
k -n "$NS" delete csv "$CSV2" --wait=true >/dev/null
for i in $(seq 120); do
  left="$(jp -n "$NS" get deploy "$dep" -o name) $(jp get mutatingwebhookconfigurations,validatingwebhookconfigurations -l olm.owner="$CSV2" -o name) $(jp -n "$NS" get svc "$dep-service" -o name) $(jp -n "$NS" get secret "$dep-service-cert" -o name)"
  [ -z "${left// /}" ] && break
  [ "$i" != 120 ] || die "left after removal: $left"
  sleep 1
done
k -n "$NS" wait --for=delete pod -l app.kubernetes.io/name=sidecarset-operator --timeout=60s >/dev/null 2>&1 || true
figure "removal: $((SECONDS - t)) s"
pass "the operator's Deployment, its webhook configurations, OLM's Service and certificate Secret are gone"
k get crd sidecarsets.apps.kruise.io >/dev/null || die "the CRD was deleted"
k get sidecarset "$DEMO" >/dev/null || die "the SidecarSet was deleted"
[ "$(k -n "$DEMO" get pod hello-1 -o jsonpath='{.metadata.uid} {.spec.containers[*].name}')" = "$uid hello-sidecar app" ] || die "pod hello-1 lost its sidecar or was replaced"
pass "kept: the CRD, SidecarSet $DEMO, pod hello-1 (same UID, with its sidecar)"
podspec probe-after | k apply -f - >/dev/null
[ "$(k -n "$DEMO" get pod probe-after -o jsonpath='{.spec.containers[*].name}')" = app ] || die "a pod created after removal was injected"
pass "a probe pod created after removal is not injected"

log "OLM e2e passed in $((SECONDS - START)) s"
cat "$W/figures.txt" >&2
