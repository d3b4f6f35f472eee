#!/usr/bin/env bash
# OLM (v0: olm-operator + catalog-operator) on the real node's control plane, for the OLM e2e
# (hack/e2e-olm.sh): built from the Go module by hack/tools.sh olm, run as two processes in the
# node's network namespace (they reach the API server and the catalog at 127.0.0.1 there), with
# OLM's CRDs from the module's deploy/chart/crds applied server-side. No packageserver (nothing
# here uses PackageManifests; an APIService with no server behind it would break discovery).
#
#   hack/olm.sh up        start it on the running node (hack/node.sh up first); idempotent
#   hack/olm.sh down      stop what up started, by PID; put the nodes' taints back; remove its state
#   hack/olm.sh status    its processes and their memory
#   hack/olm.sh env       export SSO_REGISTRY, SSO_OLM_TOOLBOX, SSO_OLM_VERSION, OLM_BIN, CRANE_BIN (for eval)
#   hack/olm.sh catalog NAME DIR   serve the file-based catalog DIR with opm (a new process on a
#                         new port) as CatalogSource olm/NAME (spec.address, no catalog pod); the
#                         previous server of NAME is stopped once OLM has connected to the new one
#   hack/olm.sh push TAR REF       push a docker-archive to the local registry (crane)
#
# What up does:
#   - the registry of hack/registry.sh in the node's network namespace (started when not running),
#     trusted by the node's containerd over plain HTTP (hack/node.sh registry);
#   - OLM's toolbox image (hack/images.sh olm: busybox, cpb, copy-content, a static opm) pushed
#     there as $SSO_REGISTRY/olm/toolbox:<OLM version>: catalog-operator's --util-image and
#     --opmImage, i.e. what OLM's bundle unpack Jobs run on the node;
#   - OLM's CRDs (server-side apply: the CSV CRD is too big for a client-side apply), namespaces
#     olm and operators, OLMConfig cluster (copied CSVs off), OperatorGroup operators/global-operators;
#   - placement: OLM's unpack Jobs select only kubernetes.io/os=linux and carry fixed tolerations,
#     so while OLM runs the real node's NoSchedule taint is lifted and the kwok nodes are tainted
#     NoSchedule instead (kwok would "complete" an unpack Job without running it); down restores both;
#   - olm-operator and catalog-operator (--set-workload-user-id: the unpack pods run as 1001).
#
# Env: SSO_WORK (default <repo>/.local; state in $SSO_WORK/olm), SSO_TIMEOUT (default 120).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${SSO_WORK:-$REPO/.local}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export SSO_WORK=$WORK
DIR=$WORK/olm
PIDS=$DIR/pids
LOGS=$DIR/logs
TIMEOUT=${SSO_TIMEOUT:-120}
TAINT_KEY=sidecarset-operator.io/real-node
KWOK_TAINT=sidecarset-operator.io/olm-test

log() { printf '[olm] %s\n' "$*" >&2; }
die() { printf '[olm] error: %s\n' "$*" >&2; exit 1; }

node_env() {
  eval "$("$REPO/hack/node.sh" env)"
  { [ -n "${SSO_NODE_NS_PID:-}" ] && [ -e "/proc/$SSO_NODE_NS_PID/ns/net" ]; } || die "the real node is not running (hack/node.sh up)"
  KUBECTL=$SSO_NODE_KUBECTL
}
k() { nsenter -t "$SSO_NODE_NS_PID" -n -- "$KUBECTL" --kubeconfig="$KUBECONFIG" --request-timeout=20s "$@"; }

# start NAME CMD...: CMD in the node's network namespace, detached, PID in pids/NAME.pid
start() {
  local name=$1
  shift
  rm -f "$PIDS/$name.pid"
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  nsenter -t "$SSO_NODE_NS_PID" -n -- setsid /bin/sh -c 'echo $$ > "$0"; exec "$@"' "$PIDS/$name.pid" "$@" \
    </dev/null >>"$LOGS/$name.log" 2>&1 8>&- &
  for _ in $(seq 50); do [ -s "$PIDS/$name.pid" ] && return 0; sleep 0.1; done
  die "$name did not start (log: $LOGS/$name.log)"
}

stop() {
  local n p
  for n in "$@"; do
    [ -s "$PIDS/$n.pid" ] || continue
    p=$(cat "$PIDS/$n.pid")
    if kill -0 "$p" 2>/dev/null; then
      kill "$p" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
      log "stopped $n ($p)"
    fi
    rm -f "$PIDS/$n.pid"
  done
}

alive() { [ -s "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

free_port() { nsenter -t "$SSO_NODE_NS_PID" -n -- python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

tools() {
  eval "$("$REPO/hack/tools.sh" olm crane)" || die "hack/tools.sh olm crane failed"
  OLM_VERSION=$("$OLM_BIN/olm" --version 2>/dev/null | sed -n 's/^OLM version: *//p')
  [ -n "$OLM_VERSION" ] || die "$OLM_BIN/olm does not report its version"
}

cmd_push() {
  local tar=${1:?usage: hack/olm.sh push TAR REF} ref=${2:?usage: hack/olm.sh push TAR REF}
  [ -n "${SSO_NODE_NS_PID:-}" ] || node_env
  [ -n "${CRANE_BIN:-}" ] || eval "$(SSO_REGISTRY_NETNS_PID=$SSO_NODE_NS_PID "$REPO/hack/registry.sh" env)"
  nsenter -t "$SSO_NODE_NS_PID" -n -- "$CRANE_BIN/crane" push --insecure "$tar" "$ref" >/dev/null 2>"$DIR/push.log" \
    || { cat "$DIR/push.log" >&2; die "crane push $tar $ref failed"; }
}

cmd_env() {
  [ -s "$DIR/env" ] || die "OLM is not running (hack/olm.sh up)"
  cat "$DIR/env"
}

cmd_up() {
  node_env
  mkdir -p "$DIR" "$PIDS" "$LOGS"
  exec 8>"$DIR/.lock"
  flock -w "$TIMEOUT" 8 || die "another hack/olm.sh holds $DIR/.lock"
  if alive olm && alive catalog && [ -s "$DIR/env" ]; then log "already running"; cat "$DIR/env"; return; fi
  local t0=$SECONDS t
  tools
  log "OLM $OLM_VERSION from $OLM_BIN"

  # The registry, in the node's network namespace, and containerd's trust in it.
  if ! SSO_REGISTRY_NETNS_PID=$SSO_NODE_NS_PID "$REPO/hack/registry.sh" env >/dev/null 2>&1; then
    touch "$DIR/started-registry"
  fi
  eval "$(SSO_REGISTRY_NETNS_PID=$SSO_NODE_NS_PID "$REPO/hack/registry.sh" up)"
  "$REPO/hack/node.sh" registry "$SSO_REGISTRY"

  # OLM's toolbox image (util + opm image), rebuilt when the binaries change.
  local toolbox=$SSO_REGISTRY/olm/toolbox:v$OLM_VERSION stamp
  stamp=$(sha256sum "$OLM_BIN/opm" "$OLM_BIN/cpb" "$OLM_BIN/copy-content" "$REPO/hack/images.sh" | sha256sum | cut -c1-16)
  if [ "$(cat "$WORK/olm-img/toolbox.stamp" 2>/dev/null)" != "$stamp" ]; then
    SSO_OLM_TOOLBOX_IMAGE=localhost/sso-e2e/olm-toolbox:v$OLM_VERSION "$REPO/hack/images.sh" olm "$OLM_BIN" "$WORK/olm-img"
    echo "$stamp" >"$WORK/olm-img/toolbox.stamp"
  fi
  cmd_push "$WORK/olm-img/olm-toolbox.tar" "$toolbox"
  log "toolbox image pushed: $toolbox"

  t=$SECONDS
  k apply --server-side --field-manager=sso-olm-test -f "$OLM_BIN/deploy/chart/crds/" >/dev/null
  k wait --for=condition=Established --timeout=60s -f "$OLM_BIN/deploy/chart/crds/" >/dev/null
  k apply --server-side --field-manager=sso-olm-test -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: olm}
---
apiVersion: v1
kind: Namespace
metadata: {name: operators}
---
apiVersion: operators.coreos.com/v1
kind: OLMConfig
metadata: {name: cluster}
spec: {features: {disableCopiedCSVs: true}}
---
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata: {name: global-operators, namespace: operators}
EOF
  log "OLM's CRDs (server-side), namespaces olm and operators, OLMConfig, OperatorGroup global-operators ($((SECONDS - t)) s)"

  # Placement (see the header): the real node takes OLM's pods, the kwok nodes none.
  local n
  : >"$DIR/kwok-nodes"
  for n in $(k get nodes -o jsonpath='{range .items[?(@.metadata.annotations.kwok\.x-k8s\.io/node)]}{.metadata.name}{"\n"}{end}'); do
    k taint node "$n" "$KWOK_TAINT=kwok:NoSchedule" --overwrite >/dev/null
    echo "$n" >>"$DIR/kwok-nodes"
  done
  if k get node "$SSO_NODE_NAME" -o jsonpath='{.spec.taints[*].key}' | grep -qw "$TAINT_KEY"; then
    k taint node "$SSO_NODE_NAME" "$TAINT_KEY=true:NoSchedule-" >/dev/null
    touch "$DIR/real-node-untainted"
  fi
  log "kwok nodes tainted $KWOK_TAINT:NoSchedule ($(paste -sd' ' "$DIR/kwok-nodes")); $SSO_NODE_NAME untainted while OLM runs"

  # The operators: no proxy (the catalog is at 127.0.0.1), the node's admin kubeconfig.
  local noproxy=(env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u GRPC_PROXY -u grpc_proxy KUBECONFIG="$KUBECONFIG")
  # (Each only when it is not running: up after one of them stopped restarts just that one.)
  alive olm || start olm "${noproxy[@]}" "$OLM_BIN/olm" --namespace olm --writeStatusName= --writePackageServerStatusName=
  alive catalog || start catalog "${noproxy[@]}" "$OLM_BIN/catalog" --namespace olm --writeStatusName= \
    --opmImage "$toolbox" --util-image "$toolbox" --configmapServerImage "$toolbox" --set-workload-user-id=true
  # Ready: olm-operator has resolved the OperatorGroup's namespaces, catalog-operator has
  # written the default OperatorGroup's... (it has no status of its own): its log says so.
  local deadline=$((SECONDS + TIMEOUT))
  until [ -n "$(k -n operators get operatorgroup global-operators -o jsonpath='{.status.lastUpdated}' 2>/dev/null)" ]; do
    alive olm || { tail -n 20 "$LOGS/olm.log" >&2; die "olm-operator exited (log: $LOGS/olm.log)"; }
    ((SECONDS < deadline)) || die "olm-operator did not resolve OperatorGroup global-operators in ${TIMEOUT}s (log: $LOGS/olm.log)"
    sleep 0.5
  done
  until grep -q 'connection established\|started workers\|starting workers\|Starting workers' "$LOGS/catalog.log" 2>/dev/null; do
    alive catalog || { tail -n 20 "$LOGS/catalog.log" >&2; die "catalog-operator exited (log: $LOGS/catalog.log)"; }
    ((SECONDS < deadline)) || die "catalog-operator did not start its workers in ${TIMEOUT}s (log: $LOGS/catalog.log)"
    sleep 0.5
  done
  {
    printf 'export SSO_REGISTRY=%q\n' "$SSO_REGISTRY"
    printf 'export CRANE_BIN=%q\n' "$CRANE_BIN"
    printf 'export OLM_BIN=%q\n' "$OLM_BIN"
    printf 'export SSO_OLM_VERSION=%q\n' "$OLM_VERSION"
    printf 'export SSO_OLM_TOOLBOX=%q\n' "$toolbox"
  } >"$DIR/env"
  log "olm-operator ($(cat "$PIDS/olm.pid")) and catalog-operator ($(cat "$PIDS/catalog.pid")) running; up in $((SECONDS - t0)) s"
  cat "$DIR/env"
}

cmd_catalog() {
  local name=${1:?usage: hack/olm.sh catalog NAME DIR} cat=${2:?usage: hack/olm.sh catalog NAME DIR}
  node_env
  [ -s "$DIR/env" ] || die "OLM is not running (hack/olm.sh up)"
  eval "$(cat "$DIR/env")"
  cat=$(cd "$cat" && pwd)
  "$OLM_BIN/opm" validate "$cat" || die "opm validate $cat failed"
  local port old=""
  port=$(free_port)
  alive "opm-$name" && old=$(cat "$PIDS/opm-$name.pid")
  [ -z "$old" ] || mv "$PIDS/opm-$name.pid" "$PIDS/opm-$name.old.pid"
  mkdir -p "$DIR/opm-cache"
  start "opm-$name" "$OLM_BIN/opm" serve "$cat" -p "$port" --pprof-addr "127.0.0.1:$(free_port)" \
    -t "$LOGS/opm-$name.termination" --cache-dir "$DIR/opm-cache/$name-$port" --cache-enforce-integrity=false
  for _ in $(seq 300); do
    nsenter -t "$SSO_NODE_NS_PID" -n -- bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && break
    alive "opm-$name" || { tail -n 20 "$LOGS/opm-$name.log" >&2; die "opm serve exited (log: $LOGS/opm-$name.log)"; }
    sleep 0.1
  done
  k apply --server-side --field-manager=sso-olm-test -f - >/dev/null <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata: {name: $name, namespace: olm}
spec:
  sourceType: grpc
  address: "127.0.0.1:$port"
  displayName: $name (local opm serve)
  publisher: sidecarset-operator e2e
EOF
  local deadline=$((SECONDS + TIMEOUT)) st
  while :; do
    st=$(k -n olm get catalogsource "$name" -o jsonpath='{.status.connectionState.address} {.status.connectionState.lastObservedState}' 2>/dev/null || true)
    [ "$st" = "127.0.0.1:$port READY" ] && break
    ((SECONDS < deadline)) || die "CatalogSource olm/$name not READY at 127.0.0.1:$port after ${TIMEOUT}s: $st"
    sleep 0.5
  done
  [ -z "$old" ] || stop "opm-$name.old"
  log "CatalogSource olm/$name serves $cat (opm serve on 127.0.0.1:$port, pid $(cat "$PIDS/opm-$name.pid")): READY"
}

cmd_status() {
  local n p rss
  for f in "$PIDS"/*.pid; do
    [ -s "$f" ] || continue
    n=$(basename "$f" .pid)
    p=$(cat "$f")
    if kill -0 "$p" 2>/dev/null; then
      rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
      printf '[olm]   %-16s pid %7s  RSS %4d MiB\n' "$n" "$p" "$((rss / 1024))" >&2
    else
      printf '[olm]   %-16s pid %7s  not running\n' "$n" "$p" >&2
    fi
  done
}

cmd_down() {
  [ -d "$DIR" ] || { log "not running; nothing to do"; return 0; }
  exec 8>"$DIR/.lock"
  flock -w "$TIMEOUT" 8 || die "another hack/olm.sh holds $DIR/.lock"
  local f
  stop catalog olm
  for f in "$PIDS"/*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done
  # The nodes as they were (when the node still runs; otherwise they are gone with it).
  if eval "$("$REPO/hack/node.sh" env)" && [ -n "${SSO_NODE_NS_PID:-}" ] && [ -e "/proc/$SSO_NODE_NS_PID/ns/net" ]; then
    KUBECTL=$SSO_NODE_KUBECTL
    local n
    while read -r n; do
      [ -n "$n" ] && k taint node "$n" "$KWOK_TAINT-" >/dev/null 2>&1 || true
    done <"$DIR/kwok-nodes" 2>/dev/null || true
    if [ -e "$DIR/real-node-untainted" ]; then
      k taint node "$SSO_NODE_NAME" "$TAINT_KEY=true:NoSchedule" --overwrite >/dev/null 2>&1 || true
    fi
    log "node taints restored"
  fi
  if [ -e "$DIR/started-registry" ]; then "$REPO/hack/registry.sh" down; fi
  rm -rf "$DIR"
  log "OLM stopped; nothing of it runs"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  catalog) shift; cmd_catalog "$@" ;;
  push) shift; node_env; cmd_push "$@" ;;
  *) echo "usage: $0 up|down|status|env|catalog NAME DIR|push TAR REF" >&2; exit 2 ;;
esac
