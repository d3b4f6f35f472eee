#!/usr/bin/env bash
# End-to-end tests against a real cluster, on a machine with Docker and kind:
#   1. create the kind cluster "sidecarset-e2e" from crates/e2e/kind-config.yaml,
#   2. build the operator image and load it into the cluster,
#   3. install the Helm chart (the operator runs in the cluster),
#   4. build the test images (hack/images.sh), load them, label and taint one worker as the
#      real node, and run the real-node suite (crates/e2e/tests/real_node.rs); E2E_ALL=1 also runs
#      the other suites (they model image pulls with kwok and mostly need the local cluster),
#   5. print the operator's logs if anything failed, and delete the cluster.
#
# Environment:
#   IMG                 image to build and load (default sidecarset-operator:dev)
#   KIND_CLUSTER_NAME   cluster name (default sidecarset-e2e)
#   KIND_NODE_IMAGE     kind node image (default: the node image hack/kind-node.sh built, when
#                       the Docker daemon has it; otherwise kind's own default)
#   KEEP_CLUSTER=1      keep the cluster afterwards (delete it with `kind delete cluster --name ...`)
#   E2E_TEST_ARGS       extra arguments for the test binary (after --), e.g. a test name filter
#
#   SSO_KIND_LOCAL=1    on a machine without a registry (`make e2e-kind-local`): start Debian's
#                       dockerd in a private network namespace (hack/kind-docker.sh), build kind's
#                       node image on the machine (hack/kind-node.sh), the operator image from the
#                       operator binary (hack/images.sh operator), then run the steps above inside
#                       that namespace, and stop the daemon at the end (nothing left running)
#
# The cluster's kubeconfig goes to .local/kind-e2e.kubeconfig; ~/.kube/config is left alone.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

CLUSTER=${KIND_CLUSTER_NAME:-sidecarset-e2e}
IMG=${IMG:-sidecarset-operator:dev}
NAMESPACE=sidecarset-system
RELEASE=sidecarset-operator
CHART=charts/sidecarset-operator
KCFG=$REPO/.local/kind-e2e.kubeconfig

log() { printf '[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] error: %s\n' "$*" >&2; exit 1; }

# Split IMG into repository and tag. A ':' before the last '/' belongs to a registry host:port.
name_part=${IMG##*/}
if [[ $name_part == *:* ]]; then
  IMG_REPO=${IMG%:*}
  IMG_TAG=${IMG##*:}
else
  IMG_REPO=$IMG
  IMG_TAG=latest
fi
[[ $IMG != *@* ]] || die "IMG must be repository:tag, not a digest reference ($IMG)"

# ---- SSO_KIND_LOCAL=1: the Docker daemon, the node image and the operator image on this machine --
# The outer run prepares everything that needs the machine (root, apt, the Go module proxy, cargo)
# and then runs this script again inside the daemon's network namespace (SSO_KIND_IN_NETNS=1),
# where kind's nodes and their published API server ports are.
if [ "${SSO_KIND_LOCAL:-0}" = 1 ] && [ "${SSO_KIND_IN_NETNS:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || die "SSO_KIND_LOCAL=1 needs root (dockerd in a private network namespace)"
  T0=$SECONDS
  phases=()
  phase() { phases+=("$(printf '%-44s %5d s' "$1" "$2")"); }
  # host state that must be left as found
  shadowed="fs/file-max fs/nr_open kernel/pid_max vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
  sysctls() { local f; for f in $shadowed; do echo "$f $(cat "/proc/sys/$f")"; done; }
  SYSCTLS_BEFORE=$(sysctls)
  MEM_LOG=$(mktemp)
  ( while sleep 2; do free -m | awk '/^Mem:/ {print $3}'; done >"$MEM_LOG" ) &
  MEM_PID=$!
  STARTED_DOCKER=0
  # shellcheck disable=SC2317 # run by the EXIT trap
  local_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    kill "$MEM_PID" 2>/dev/null || true
    if [ "$STARTED_DOCKER" = 1 ]; then
      if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
        log "KEEP_CLUSTER=1: the Docker daemon keeps running (hack/kind-docker.sh down stops it)"
      else
        "$REPO/hack/kind-docker.sh" down || rc=1
      fi
    fi
    local after
    after=$(sysctls)
    if [ "$after" != "$SYSCTLS_BEFORE" ]; then
      log "the host's global sysctls changed:"; diff <(echo "$SYSCTLS_BEFORE") <(echo "$after") >&2 || true; rc=1
    fi
    if [ ${#phases[@]} -gt 0 ]; then
      log "phases:"; printf '[e2e]   %s\n' "${phases[@]}" >&2
      log "total $((SECONDS - T0)) s; peak memory used on the machine $(sort -n "$MEM_LOG" | tail -n1) MiB (before: ${MEM_BEFORE:-?} MiB);" \
        "Docker data-root $(du -sh "${SSO_KIND_DOCKER_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/kind-docker}" 2>/dev/null | cut -f1)"
    fi
    rm -f "$MEM_LOG"
    exit "$rc"
  }
  MEM_BEFORE=$(free -m | awk '/^Mem:/ {print $3}')
  trap local_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  t=$SECONDS
  tools=$("$REPO/hack/tools.sh" kind kind-k8s helm) || die "hack/tools.sh could not build kind, kubectl or helm"
  eval "$tools"
  phase "tools (kind, kubeadm/kubelet/kubectl..., helm)" $((SECONDS - t))
  if ! "$REPO/hack/kind-docker.sh" status >/dev/null 2>&1; then
    t=$SECONDS; "$REPO/hack/kind-docker.sh" up; STARTED_DOCKER=1; phase "dockerd up" $((SECONDS - t))
  fi
  eval "$("$REPO/hack/kind-docker.sh" env)"
  export DOCKER_HOST
  t=$SECONDS
  KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-$("$REPO/hack/kind-node.sh" build)}
  phase "node image $KIND_NODE_IMAGE" $((SECONDS - t))
  t=$SECONDS
  cargo build --bin sidecarset-operator
  cargo build -p sidecarset-e2e --tests
  phase "cargo build (operator, e2e tests)" $((SECONDS - t))
  t=$SECONDS
  IMG_DIR=$REPO/.local/kind-images
  SSO_OPERATOR_IMAGE=$IMG "$REPO/hack/images.sh" operator "$REPO/target/debug/sidecarset-operator" "$IMG_DIR"
  docker load -i "$IMG_DIR/operator.tar" >/dev/null
  "$REPO/hack/images.sh" test "$IMG_DIR"
  "$REPO/hack/images.sh" ids "$IMG_DIR"
  phase "operator image (from target/debug) and test images" $((SECONDS - t))
  t=$SECONDS
  rc=0
  nsenter -t "$SSO_KIND_NETNS_PID" -n -- env SSO_KIND_IN_NETNS=1 SSO_KIND_IMAGE_LOADED=1 SSO_KIND_TEST_IMAGES=1 \
    KIND_NODE_IMAGE="$KIND_NODE_IMAGE" IMG="$IMG" DOCKER_HOST="$DOCKER_HOST" \
    PATH="$KIND_BIN:$KIND_K8S_BIN:$HELM_BIN:$PATH" SSO_E2E_PHASES="$IMG_DIR/phases" "$0" "$@" || rc=$?
  [ ! -s "$IMG_DIR/phases" ] || { while read -r line; do phases+=("$line"); done <"$IMG_DIR/phases"; rm -f "$IMG_DIR/phases"; }
  phase "in the namespace: cluster, helm, suite, delete" $((SECONDS - t))
  exit "$rc"
fi
# phase NAME SECONDS: a line of the table that the SSO_KIND_LOCAL=1 run prints at the end
phase() { [ -z "${SSO_E2E_PHASES:-}" ] || printf '%-44s %5d s\n' "  $1" "$2" >>"$SSO_E2E_PHASES"; }

# ---- prerequisites -----------------------------------------------------------------------------
missing=()
for tool in docker kind; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  die "make e2e needs Docker and kind (not on PATH: ${missing[*]}). Without them, run the tests against the local kwok cluster instead (hack/cluster.sh up)."
fi
docker info >/dev/null 2>&1 || die "make e2e needs Docker and kind: 'docker info' fails (is the Docker daemon running, may this user use it?)"
command -v kubectl >/dev/null 2>&1 || die "kubectl is not on PATH"
command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH"
if command -v helm >/dev/null 2>&1; then
  HELM=$(command -v helm)
else
  log "helm is not on PATH; building it with hack/tools.sh"
  tools=$("$REPO/hack/tools.sh" helm) || die "helm is not on PATH and hack/tools.sh could not build it"
  eval "$tools"
  HELM=$HELM_BIN/helm
fi
[ -d "$CHART" ] || die "chart $CHART not found"

kc() { kubectl --kubeconfig "$KCFG" "$@"; }

# ---- cleanup -----------------------------------------------------------------------------------
CREATED=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$CREATED" = 1 ]; then
    if [ "$rc" != 0 ]; then
      log "FAILED (exit $rc); operator logs:"
      kc logs -n "$NAMESPACE" -l app.kubernetes.io/name=sidecarset-operator --tail=-1 --all-containers --prefix >&2 || true
      log "pods:"
      kc get pods -A -o wide >&2 || true
      log "events in $NAMESPACE:"
      kc get events -n "$NAMESPACE" --sort-by=.lastTimestamp >&2 || true
    fi
    if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
      log "KEEP_CLUSTER=1: cluster '$CLUSTER' kept; KUBECONFIG=$KCFG"
    else
      log "deleting kind cluster '$CLUSTER'"
      kind delete cluster --name "$CLUSTER" --kubeconfig "$KCFG" >&2 || log "could not delete kind cluster '$CLUSTER'"
      rm -f "$KCFG"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- cluster -----------------------------------------------------------------------------------
mkdir -p "$(dirname "$KCFG")"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "deleting the leftover kind cluster '$CLUSTER'"
  kind delete cluster --name "$CLUSTER" --kubeconfig "$KCFG" >&2
fi
log "creating kind cluster '$CLUSTER'"
CREATED=1
create_args=(create cluster --name "$CLUSTER" --config crates/e2e/kind-config.yaml --kubeconfig "$KCFG" --wait 180s)
# The node image hack/kind-node.sh built on this machine (no registry), when the daemon has it;
# elsewhere kind's default image.
if [ -z "${KIND_NODE_IMAGE:-}" ] && local_node=$("$REPO/hack/kind-node.sh" image 2>/dev/null); then
  log "using the node image built on this machine: $local_node (KIND_NODE_IMAGE overrides it)"
  KIND_NODE_IMAGE=$local_node
fi
[ -z "${KIND_NODE_IMAGE:-}" ] || create_args+=(--image "$KIND_NODE_IMAGE")
t=$SECONDS
kind "${create_args[@]}"
kc wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
phase "kind create cluster ($(kc get nodes --no-headers | wc -l) nodes Ready)" $((SECONDS - t))

# ---- image -------------------------------------------------------------------------------------
VERSION=${VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)}
if [ "${SSO_KIND_IMAGE_LOADED:-0}" != 1 ]; then
  log "building image $IMG (version $VERSION)"
  docker build -t "$IMG" --build-arg VERSION="$VERSION" .
fi
log "loading $IMG into '$CLUSTER'"
t=$SECONDS
kind load docker-image "$IMG" --name "$CLUSTER"
phase "kind load docker-image $IMG" $((SECONDS - t))

# ---- operator ----------------------------------------------------------------------------------
log "installing chart $CHART into $NAMESPACE"
t=$SECONDS
"$HELM" upgrade --install "$RELEASE" "$CHART" --kubeconfig "$KCFG" \
  -n "$NAMESPACE" --create-namespace \
  --set "image.repository=$IMG_REPO,image.tag=$IMG_TAG,image.pullPolicy=Never" \
  --set metrics.enabled=true --wait --timeout 5m
log "operator pods: $(kc get pods -n "$NAMESPACE" -l app.kubernetes.io/name=sidecarset-operator --no-headers | awk '{print $1 " " $2 " " $3}' | paste -sd, -)"
phase "helm install (replicas Ready)" $((SECONDS - t))

# The metrics test scrapes the operator through a port-forward to its metrics Service.
kubectl --kubeconfig "$KCFG" -n "$NAMESPACE" port-forward "svc/$RELEASE-metrics" 19090:8080 >/dev/null 2>&1 &
PORT_FORWARD_PID=$!
export SSO_E2E_METRICS_URL=http://127.0.0.1:19090/metrics

# ---- real-node suite: local images, one worker as the "real node" ------------------------------
# The same images and suite as hack/e2e-node.sh: busybox v1/v2/v3 (and v2-alias) built by
# hack/images.sh without a registry, loaded into every kind node; one worker labelled and
# tainted as the real node; crates/e2e/tests/real_node.rs against the operator installed above.
IMG_DIR=$REPO/.local/kind-images
if [ "${SSO_KIND_TEST_IMAGES:-0}" != 1 ]; then
  log "building the test images into $IMG_DIR (hack/images.sh: umoci, skopeo, busybox-static)"
  "$REPO/hack/images.sh" test "$IMG_DIR"
  "$REPO/hack/images.sh" ids "$IMG_DIR"
fi
# Imported by tag only (`ctr images import` without --digests), as on the real node of
# hack/node.sh: `kind load image-archive` imports with --digests, containerd then also names each
# image import-<date>@sha256:<manifest digest>, and its CRI reports that name as the containers'
# imageID, not the config digest the suite expects (hack/images.sh ids). Every test image: the
# busybox versions and the hot-upgrade sidecar's.
for n in $(kind get nodes --name "$CLUSTER"); do
  for f in "$IMG_DIR"/busybox-v[0-9].tar "$IMG_DIR"/hot-*.tar; do
    docker exec -i "$n" ctr -n k8s.io images import --all-platforms - <"$f" >/dev/null
  done
  docker exec "$n" ctr -n k8s.io images tag --force localhost/sso-e2e/busybox:v2 localhost/sso-e2e/busybox:v2-alias >/dev/null
done
REAL_NODE=$(kc get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[0].metadata.name}')
[ -n "$REAL_NODE" ] || die "no kind worker to run the real-node suite on"
kc label node "$REAL_NODE" sidecarset-operator.io/real-node=true --overwrite >/dev/null
kc taint node "$REAL_NODE" sidecarset-operator.io/real-node=true:NoSchedule --overwrite >/dev/null
log "running the real-node suite on $REAL_NODE (crates/e2e/tests/real_node.rs)"
t=$SECONDS
KUBECONFIG=$KCFG SSO_E2E_OPERATOR=external SSO_E2E_REAL_NODE=$REAL_NODE \
  SSO_E2E_IMAGE_IDS=$IMG_DIR/image-ids \
  cargo test -p sidecarset-e2e --test real_node -- --ignored --test-threads=3
phase "real-node suite on $REAL_NODE" $((SECONDS - t))

# ---- the other suites --------------------------------------------------------------------------
# They model image pulls with kwok's Stages (images that never exist in a registry): on kind's
# real kubelet their pods do not run. E2E_ALL=1 runs them anyway (for the tests that only admit).
if [ "${E2E_ALL:-0}" = 1 ]; then
  log "running the e2e tests"
  cargo build --bin sidecarset-operator  # the e2e suite also runs the binary (OpenKruise check)
  # shellcheck disable=SC2086 # E2E_TEST_ARGS is a list of words on purpose
  KUBECONFIG=$KCFG SSO_E2E_OPERATOR=external cargo test -p sidecarset-e2e -- --test-threads=1 ${E2E_TEST_ARGS:-}
fi
log "e2e tests passed"
kill "$PORT_FORWARD_PID" 2>/dev/null || true
