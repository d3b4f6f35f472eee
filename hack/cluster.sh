#!/usr/bin/env bash
# A local test cluster without a container engine: kwokctl's "binary" runtime runs etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok-controller as plain processes,
# using the binaries that hack/tools.sh builds. Nodes are simulated by kwok: Pods are scheduled
# and become Running/Ready, but no container ever runs. The kwok Stages in hack/kwok-stages.yaml
# (kwok's defaults plus in-place image changes) also make a container whose image is patched in
# place restart and get ready again, like a kubelet would.
#
#   hack/cluster.sh up      create the cluster (removing leftovers of an earlier run first),
#                           add fake nodes, check that a Pod gets scheduled and becomes Ready
#   hack/cluster.sh down    delete the cluster and stop every process of it (idempotent)
#   hack/cluster.sh env     print 'export KUBECONFIG=...' for eval
#   hack/cluster.sh restart COMPONENT [DOWN_SECONDS]
#                           stop one process of the running cluster (etcd, kube-apiserver, ...),
#                           keep it down DOWN_SECONDS (default 0), start it again with the same
#                           command line and environment (the fault tests of crates/e2e/tests/faults.rs)
#   hack/cluster.sh revive  start again, as they were, the components that exited since a
#                           'restart' (kube-controller-manager and kube-scheduler exit when they
#                           lose their leader lease during an outage)
#
# Everything stays under ${SSO_WORK:-<repo>/.local}: kwokctl's state (KWOK_WORKDIR=$SSO_WORK/kwok),
# the admin kubeconfig ($SSO_WORK/kubeconfig) and kubectl's cache. ~/.kube and ~/.kwok are never
# touched.
#
# Environment:
#   SSO_CLUSTER_NAME    cluster name (default sidecarset-operator-test)
#   SSO_WORK            state directory (default <repo>/.local)
#   SSO_TIMEOUT         timeout in seconds of each wait (default 180)
#   SSO_NODES           number of fake nodes (default 3)
#   SSO_APISERVER_PORT  apiserver port (default: a free port picked at random in 20000-29999)
#   SSO_BIND_ADDRESS    address the components listen on (default 127.0.0.1)
#   SSO_KUBECTL         kubectl binary (default: kubectl on PATH; for the google-cloud-sdk
#                       dispatcher, the newest kubectl.1.NN next to it)
#   SSO_KWOK_STAGES     file of kwok Stage documents (default <repo>/hack/kwok-stages.yaml);
#                       empty: kwok's built-in default Stages only
#   SSO_KEEP_ON_FAILURE=1  leave a cluster whose 'up' failed running, for debugging
#   SSO_APISERVER_EXTRA_ARGS  more kube-apiserver flags, "key=value" words separated by spaces
#   SSO_CONTROLLER_MANAGER_EXTRA_ARGS  more kube-controller-manager flags, "key=value" words
#                             (hack/e2e-node.sh: the endpoint controllers' batch periods)
#   SSO_APISERVER_CERT_SANS   more names/IPs in the API server's certificate, comma-separated
#   SSO_NO_PROXY_EXTRA        more NO_PROXY entries (hosts, CIDRs) for the cluster's processes
#   SSO_AUDIT_POLICY          an audit policy file: the API server writes its audit log to
#                             $SSO_WORK/kwok/clusters/$SSO_CLUSTER_NAME/logs/audit.log
#   (hack/node.sh uses these three to run this cluster with a real kubelet.)
#
# kwok manages only the nodes annotated kwok.x-k8s.io/node=fake (the ones `kwokctl scale node`
# makes), so a real kubelet can join the cluster without kwok taking over its node and pods.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=${SSO_CLUSTER_NAME:-sidecarset-operator-test}
WORK=${SSO_WORK:-$REPO/.local}
TIMEOUT=${SSO_TIMEOUT:-180}
NODES=${SSO_NODES:-3}
BIND_ADDRESS=${SSO_BIND_ADDRESS:-127.0.0.1}
STAGES=${SSO_KWOK_STAGES-$REPO/hack/kwok-stages.yaml}

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

case $NAME in
  '' | *[!a-z0-9-]*) die "SSO_CLUSTER_NAME='$NAME' must consist of lower-case letters, digits and '-'" ;;
esac
case $TIMEOUT in '' | *[!0-9]*) die "SSO_TIMEOUT='$TIMEOUT' must be a number of seconds" ;; esac
case $NODES in '' | *[!0-9]* | 0*) die "SSO_NODES='$NODES' must be a positive number" ;; esac

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export KWOK_WORKDIR=$WORK/kwok
CLUSTER_DIR=$KWOK_WORKDIR/clusters/$NAME
KUBECONFIG_FILE=$WORK/kubeconfig
KWOKCTL_LOG=$WORK/kwokctl-$NAME.log
# kubectl's discovery/http cache would otherwise go to ~/.kube/cache.
export KUBECACHEDIR=$WORK/kube-cache
HOME_KUBECONFIG=$HOME/.kube/config

# ---------------------------------------------------------------------------------------------
# helpers

# Serialise up/down of one cluster (two terminals, CI retries).
lock() {
  exec 8>"$WORK/.cluster-$NAME.lock"
  flock -n 8 && return 0
  log "waiting for another 'hack/cluster.sh' working on cluster '$NAME' (lock $WORK/.cluster-$NAME.lock)"
  flock -w "$TIMEOUT" 8 || die "another 'hack/cluster.sh' for cluster '$NAME' holds $WORK/.cluster-$NAME.lock"
}

# wait_until DESCRIPTION COMMAND...: run COMMAND every half second until it succeeds, at most
# $TIMEOUT seconds.
wait_until() {
  local what=$1 deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.5
  done
}

kube() { "$KUBECTL" --kubeconfig="$KUBECONFIG_FILE" --request-timeout=10s "$@"; }

# kwokctl with every download made impossible: all binaries are passed explicitly, and a dead
# proxy catches anything else (Go never proxies loopback, so talking to the cluster still works).
# The lock's file descriptor is closed, or the cluster's daemons would inherit it and hold the lock.
kwokctl_run() {
  HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
    http_proxy=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost${SSO_NO_PROXY_EXTRA:+,$SSO_NO_PROXY_EXTRA} \
    no_proxy=127.0.0.1,localhost${SSO_NO_PROXY_EXTRA:+,$SSO_NO_PROXY_EXTRA} \
    KUBECONFIG=$KUBECONFIG_FILE PATH="$WORK/bin:$PATH" \
    timeout --kill-after=10 "$TIMEOUT" "$KWOKCTL" "$@" 8>&-
}

# Checksum of the user's kubeconfig, to prove it is left alone.
home_kubeconfig_sum() {
  if [ -e "$HOME_KUBECONFIG" ]; then sha256sum "$HOME_KUBECONFIG" | cut -d' ' -f1; else echo absent; fi
}

# PIDs of processes (other than this script) whose command line mentions the cluster directory.
cluster_pids() {
  # The directory goes through the environment so that awk's own command line does not match.
  ps -e -ww -o pid=,args= | D="$CLUSTER_DIR/" SELF=$$ awk 'index($0, ENVIRON["D"]) && $1 != ENVIRON["SELF"] { print $1 }'
}

kill_cluster_processes() {
  local pids deadline
  pids=$(cluster_pids)
  [ -n "$pids" ] || return 0
  log "stopping leftover processes of $CLUSTER_DIR: $(echo "$pids" | tr '\n' ' ')"
  # shellcheck disable=SC2086 # word splitting of the PID list is intended
  kill -TERM $pids 2>/dev/null || true
  # A test cluster needs no graceful shutdown; kube-apiserver may hang on SIGTERM once etcd is gone.
  deadline=$((SECONDS + 5))
  while pids=$(cluster_pids) && [ -n "$pids" ] && ((SECONDS < deadline)); do sleep 0.2; done
  if [ -n "$pids" ]; then
    log "processes did not stop after SIGTERM, sending SIGKILL: $(echo "$pids" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while pids=$(cluster_pids) && [ -n "$pids" ] && ((SECONDS < deadline)); do sleep 0.2; done
    [ -z "$pids" ] || die "could not stop processes $(echo "$pids" | tr '\n' ' ')"
  fi
}

# Locate kubectl. The google-cloud-sdk dispatcher defaults to an old client; prefer the newest
# versioned kubectl installed next to it.
find_kubectl() {
  if [ -n "${SSO_KUBECTL:-}" ]; then
    KUBECTL=$SSO_KUBECTL
    [ -x "$KUBECTL" ] || KUBECTL=$(command -v "$KUBECTL" 2>/dev/null) || die "SSO_KUBECTL=$SSO_KUBECTL is not executable"
    return
  fi
  KUBECTL=$(command -v kubectl 2>/dev/null) || die "kubectl is not on PATH (or set SSO_KUBECTL)"
  if "$KUBECTL" version --client 2>/dev/null | grep -q dispatcher; then
    local real newest
    real=$(readlink -f "$KUBECTL")
    newest=$(find "$(dirname "$real")" -maxdepth 1 -name 'kubectl.1.*' -perm -u+x 2>/dev/null | sort -V | tail -n1)
    [ -n "$newest" ] && KUBECTL=$newest
  fi
}

# kwokctl runs kubectl from PATH (and would download one otherwise): give it ours. Also remember
# kwokctl for 'down'.
link_kubectl() {
  mkdir -p "$WORK/bin"
  ln -sfn "$KUBECTL" "$WORK/bin/kubectl"
  ln -sfn "$KWOKCTL" "$WORK/bin/kwokctl"
  export KWOK_KUBECTL_BINARY=$KUBECTL
}

# Is PORT free on the bind address? Binds it when python3 is there, otherwise checks that nothing
# accepts connections on it.
port_free() {
  local port=$1 host=$BIND_ADDRESS
  if command -v python3 >/dev/null; then
    python3 - "$host" "$port" <<'EOF' 2>/dev/null
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.close()
EOF
  else
    [ "$host" = 0.0.0.0 ] && host=127.0.0.1
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 1; fi
  fi
}

# Pick the apiserver port. Outside kwokctl's own range (it counts down from 32767 for etcd, the
# kwok-controller and friends) and below the kernel's ephemeral range.
pick_port() {
  if [ -n "${SSO_APISERVER_PORT:-}" ]; then
    port_free "$SSO_APISERVER_PORT" || die "SSO_APISERVER_PORT=$SSO_APISERVER_PORT is already in use on $BIND_ADDRESS"
    APISERVER_PORT=$SSO_APISERVER_PORT
    return
  fi
  local lo=20000 span=10000 start i p
  start=$((RANDOM % span))
  for ((i = 0; i < 200; i++)); do
    p=$((lo + (start + i * 37) % span))
    if port_free "$p"; then APISERVER_PORT=$p; return; fi
  done
  die "no free port for kube-apiserver in $lo-$((lo + span - 1)) on $BIND_ADDRESS (tried 200); set SSO_APISERVER_PORT"
}

# Pick etcd's client port the same way, in 30000-31999: kwokctl's own choice counts down from
# 32767 and takes a port that is free at that moment, so two clusters on one machine could end
# up on one etcd (a second cluster's apiserver silently storing into the first's) when the first
# one's etcd was briefly down (the fault tests stop it) while the second was created.
pick_etcd_port() {
  local lo=30000 span=2000 start i p
  start=$((RANDOM % span))
  for ((i = 0; i < 200; i++)); do
    p=$((lo + (start + i * 37) % span))
    if [ "$p" != "$APISERVER_PORT" ] && port_free "$p"; then ETCD_PORT=$p; return; fi
  done
  die "no free port for etcd in $lo-$((lo + span - 1)) on $BIND_ADDRESS (tried 200)"
}

# kwokctl as linked by 'up' (for 'down', which must not build anything).
find_kwokctl_linked() {
  KWOKCTL=
  if [ -x "$WORK/bin/kwokctl" ]; then KWOKCTL=$WORK/bin/kwokctl; fi
}

print_logs() {
  local f
  [ -d "$CLUSTER_DIR/logs" ] || return 0
  for f in "$CLUSTER_DIR"/logs/*.log; do
    [ -f "$f" ] || continue
    printf '[cluster] ---- last lines of %s\n' "$f" >&2
    tail -n 15 "$f" >&2 || true
  done
  [ -f "$KWOKCTL_LOG" ] && { printf '[cluster] ---- last lines of %s\n' "$KWOKCTL_LOG" >&2; tail -n 15 "$KWOKCTL_LOG" >&2; }
  return 0
}

# ---------------------------------------------------------------------------------------------
# down

teardown() {
  if [ -d "$CLUSTER_DIR" ]; then
    [ -n "${KWOKCTL:-}" ] || find_kwokctl_linked
    if [ -n "$KWOKCTL" ]; then
      log "deleting cluster '$NAME'"
      kwokctl_run delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG_FILE" >>"$KWOKCTL_LOG" 2>&1 \
        || log "kwokctl delete cluster failed (see $KWOKCTL_LOG); cleaning up by hand"
    else
      log "kwokctl not found at $WORK/bin/kwokctl; cleaning up by hand"
    fi
  fi
  kill_cluster_processes
  rm -rf "$CLUSTER_DIR"
  rm -f "$KUBECONFIG_FILE"
}

cmd_down() {
  lock
  local before
  before=$(home_kubeconfig_sum)
  if [ ! -d "$CLUSTER_DIR" ] && [ -z "$(cluster_pids)" ]; then
    rm -f "$KUBECONFIG_FILE"
    log "cluster '$NAME' is not running; nothing to do"
    return 0
  fi
  teardown
  [ "$(home_kubeconfig_sum)" = "$before" ] || die "$HOME_KUBECONFIG changed during 'down'; this is a bug"
  log "cluster '$NAME' deleted"
}

# ---------------------------------------------------------------------------------------------
# up

UP_DONE=0
on_up_exit() {
  local rc=$?
  [ "$UP_DONE" = 1 ] && return 0
  log "'up' failed (exit $rc)"
  print_logs
  if [ "${SSO_KEEP_ON_FAILURE:-0}" = 1 ]; then
    log "SSO_KEEP_ON_FAILURE=1: leaving the cluster running; remove it with 'hack/cluster.sh down'"
  else
    log "removing the half-created cluster (set SSO_KEEP_ON_FAILURE=1 to keep it)"
    teardown || true
  fi
  exit "$rc"
}

cmd_up() {
  local start=$SECONDS tools before B
  lock

  log "locating test tools (hack/tools.sh all; builds them on the first run)"
  tools=$("$REPO/hack/tools.sh" all) || die "hack/tools.sh failed"
  eval "$tools"
  for B in "$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" "$K8S_BIN/kube-scheduler" \
           "$ETCD_BIN/etcd" "$KWOK_BIN/kwok" "$KWOK_BIN/kwokctl"; do
    [ -x "$B" ] || die "$B is missing after hack/tools.sh"
  done
  KWOKCTL=$KWOK_BIN/kwokctl
  find_kubectl
  link_kubectl
  before=$(home_kubeconfig_sum)

  # Leftovers of an earlier run that was killed: cluster directory, processes, kubeconfig.
  if [ -d "$CLUSTER_DIR" ] || [ -n "$(cluster_pids)" ]; then
    log "removing leftovers of an earlier cluster '$NAME'"
    teardown
  fi
  rm -f "$KUBECONFIG_FILE"
  mkdir -p "$KWOK_WORKDIR"
  : >"$KWOKCTL_LOG"

  trap on_up_exit EXIT
  pick_port
  pick_etcd_port

  cat >"$WORK/kwokctl-config.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: $BIND_ADDRESS
EOF
  if [ -n "${SSO_APISERVER_CERT_SANS:-}" ]; then
    printf '  kubeApiserverCertSANs:\n' >>"$WORK/kwokctl-config.yaml"
    local san
    for san in ${SSO_APISERVER_CERT_SANS//,/ }; do printf '  - "%s"\n' "$san" >>"$WORK/kwokctl-config.yaml"; done
  fi
  # kwokctl's binary runtime always passes --manage-all-nodes=true; the later flags win, so kwok
  # leaves nodes alone that are not its fake ones (a real kubelet's).
  cat >>"$WORK/kwokctl-config.yaml" <<EOF
componentsPatches:
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
EOF
  if [ -n "${SSO_APISERVER_EXTRA_ARGS:-}" ]; then
    printf -- '- name: kube-apiserver\n  extraArgs:\n' >>"$WORK/kwokctl-config.yaml"
    local kv
    for kv in $SSO_APISERVER_EXTRA_ARGS; do
      case $kv in *=*) ;; *) die "SSO_APISERVER_EXTRA_ARGS: '$kv' is not key=value" ;; esac
      printf '  - key: "%s"\n    value: "%s"\n' "${kv%%=*}" "${kv#*=}" >>"$WORK/kwokctl-config.yaml"
    done
  fi
  if [ -n "${SSO_CONTROLLER_MANAGER_EXTRA_ARGS:-}" ]; then
    printf -- '- name: kube-controller-manager\n  extraArgs:\n' >>"$WORK/kwokctl-config.yaml"
    local kv
    for kv in $SSO_CONTROLLER_MANAGER_EXTRA_ARGS; do
      case $kv in *=*) ;; *) die "SSO_CONTROLLER_MANAGER_EXTRA_ARGS: '$kv' is not key=value" ;; esac
      printf '  - key: "%s"\n    value: "%s"\n' "${kv%%=*}" "${kv#*=}" >>"$WORK/kwokctl-config.yaml"
    done
  fi
  # kwokctl hands the Stage documents of its --config to the kwok controller; with any Stage there,
  # kwok's built-in default Stages are not loaded (the file repeats them).
  if [ -n "$STAGES" ]; then
    [ -f "$STAGES" ] || die "SSO_KWOK_STAGES=$STAGES: no such file"
    grep -q '^kind: Stage' "$STAGES" || die "$STAGES holds no kwok Stage"
    { printf -- '---\n'; cat "$STAGES"; } >>"$WORK/kwokctl-config.yaml"
  fi
  local args=(
    create cluster
    --name "$NAME"
    --config "$WORK/kwokctl-config.yaml"
    --runtime binary
    --kube-apiserver-binary "$K8S_BIN/kube-apiserver"
    --kube-controller-manager-binary "$K8S_BIN/kube-controller-manager"
    --kube-scheduler-binary "$K8S_BIN/kube-scheduler"
    --etcd-binary "$ETCD_BIN/etcd"
    --kwok-controller-binary "$KWOK_BIN/kwok"
    --kube-apiserver-port "$APISERVER_PORT"
    --etcd-port "$ETCD_PORT"
    --kube-admission=true
    --kube-authorization=true
    --kubeconfig "$KUBECONFIG_FILE"
    --quiet-pull
  )
  if [ -n "${SSO_AUDIT_POLICY:-}" ]; then
    [ -f "$SSO_AUDIT_POLICY" ] || die "SSO_AUDIT_POLICY=$SSO_AUDIT_POLICY: no such file"
    args+=(--kube-audit-policy "$(cd "$(dirname "$SSO_AUDIT_POLICY")" && pwd)/$(basename "$SSO_AUDIT_POLICY")")
  fi

  # A dry run lists every binary kwokctl would fetch; all of them must be local files.
  local remote
  remote=$(kwokctl_run "${args[@]}" --dry-run 2>/dev/null | awk '$1 == "#" && $2 == "Download" && $3 ~ /:\/\// { print $3 }') \
    || die "kwokctl create cluster --dry-run failed: $(kwokctl_run "${args[@]}" --dry-run 2>&1 | tail -n 5)"
  [ -z "$remote" ] || die "kwokctl would download: $remote (a binary is missing from the flags)"

  log "creating cluster '$NAME' (kwokctl $("$KWOKCTL" --version | awk '{print $3}'), kube-apiserver $APISERVER_PORT on $BIND_ADDRESS, state in $KWOK_WORKDIR)"
  kwokctl_run "${args[@]}" >>"$KWOKCTL_LOG" 2>&1 || die "kwokctl create cluster failed (log: $KWOKCTL_LOG)"
  [ -s "$KUBECONFIG_FILE" ] || die "kwokctl did not write $KUBECONFIG_FILE"

  log "waiting for the API server (timeout ${TIMEOUT}s)"
  wait_until "the API server at https://127.0.0.1:$APISERVER_PORT to become ready" kube get --raw=/readyz
  # kube-controller-manager creates it; without it the ServiceAccount admission plugin rejects Pods.
  wait_until "ServiceAccount default/default (created by kube-controller-manager)" kube -n default get serviceaccount default

  log "adding $NODES fake nodes"
  kwokctl_run scale node --name "$NAME" --replicas "$NODES" >>"$KWOKCTL_LOG" 2>&1 || die "kwokctl scale node failed (log: $KWOKCTL_LOG)"
  nodes_ready() {
    [ "$(kube get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' | grep -c '^True$')" -ge "$NODES" ]
  }
  wait_until "$NODES nodes to become Ready" nodes_ready

  local pod=sso-smoke-$RANDOM
  log "checking that a Pod is scheduled and becomes Ready (pod default/$pod)"
  kube apply -f - >/dev/null <<EOF || die "could not create the smoke-test Pod"
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: default
  labels:
    app.kubernetes.io/name: sso-smoke
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - name: pause
      image: sso-smoke.invalid/pause:0
EOF
  pod_ready() {
    kube -n default get pod "$pod" -o jsonpath='{.spec.nodeName}/{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}' \
      | grep -Eq '^[^/]+/Running/True$'
  }
  if ! (wait_until "pod default/$pod to be scheduled and become Running/Ready" pod_ready); then
    kube -n default describe pod "$pod" >&2 || true
    die "the smoke-test Pod did not become Running/Ready within ${TIMEOUT}s: scheduling or kwok does not work"
  fi
  # The default Stages set no imageID; hack/kwok-stages.yaml does.
  if [ -n "$STAGES" ] && [ -z "$(kube -n default get pod "$pod" -o jsonpath='{.status.containerStatuses[0].imageID}')" ]; then
    die "the Stages of $STAGES are not in effect (the smoke-test Pod has no imageID)"
  fi
  kube -n default delete pod "$pod" --wait=true --timeout="${TIMEOUT}s" >/dev/null || die "could not delete the smoke-test Pod"

  [ "$(home_kubeconfig_sum)" = "$before" ] || die "$HOME_KUBECONFIG changed during 'up'; this is a bug"
  UP_DONE=1
  trap - EXIT
  log "cluster '$NAME' is ready in $((SECONDS - start)) s: $NODES nodes, kubeconfig $KUBECONFIG_FILE"
  log "use it with: eval \"\$(hack/cluster.sh env)\""
}

# ---------------------------------------------------------------------------------------------

cmd_env() {
  [ -s "$KUBECONFIG_FILE" ] || log "warning: $KUBECONFIG_FILE does not exist; run 'hack/cluster.sh up' first"
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
}

# restart COMPONENT [DOWN_SECONDS]: the process kwokctl started (pids/COMPONENT.pid) is stopped
# and started again as it was: same command line, working directory and environment. Every
# running component is saved first (for 'revive').
save_component() {
  local c=$1 pid
  pid=$(cat "$CLUSTER_DIR/pids/$c.pid" 2>/dev/null) || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  mkdir -p "$CLUSTER_DIR/saved"
  cp "/proc/$pid/cmdline" "$CLUSTER_DIR/saved/$c.cmdline"
  cp "/proc/$pid/environ" "$CLUSTER_DIR/saved/$c.environ"
  readlink "/proc/$pid/cwd" >"$CLUSTER_DIR/saved/$c.cwd"
}

start_saved() {
  local c=$1
  local -a cmd env
  mapfile -d '' -t cmd <"$CLUSTER_DIR/saved/$c.cmdline"
  mapfile -d '' -t env <"$CLUSTER_DIR/saved/$c.environ"
  (cd "$(cat "$CLUSTER_DIR/saved/$c.cwd")" && exec env -i "${env[@]}" setsid "${cmd[@]}" >>"$CLUSTER_DIR/logs/$c.log" 2>&1 </dev/null 8>&- &
   echo $! >"$CLUSTER_DIR/pids/$c.pid")
  log "started $c (pid $(cat "$CLUSTER_DIR/pids/$c.pid"))"
}

cmd_restart() {
  local component=${1:-} down=${2:-0} pid deadline f
  case $component in '' | *[!a-z0-9-]*) die "restart: name a component (etcd, kube-apiserver, ...)" ;; esac
  case $down in '' | *[!0-9]*) die "restart: DOWN_SECONDS='$down' must be a number of seconds" ;; esac
  [ -f "$CLUSTER_DIR/pids/$component.pid" ] || die "restart: no $CLUSTER_DIR/pids/$component.pid (is cluster '$NAME' up? components: $(find "$CLUSTER_DIR/pids" -maxdepth 1 -name '*.pid' -printf '%f ' 2>/dev/null | sed 's/\.pid / /g'))"
  for f in "$CLUSTER_DIR"/pids/*.pid; do save_component "$(basename "$f" .pid)" || true; done
  save_component "$component" || die "restart: $component is not running"
  pid=$(cat "$CLUSTER_DIR/pids/$component.pid")
  log "stopping $component (pid $pid) for ${down}s"
  # kube-apiserver may take long to drain on SIGTERM: a crash-like stop after 3 s.
  kill -TERM "$pid"
  deadline=$((SECONDS + 3))
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS < deadline)) || { kill -KILL "$pid" 2>/dev/null || true; }
    sleep 0.1
  done
  sleep "$down"
  start_saved "$component"
}

cmd_revive() {
  local f c pid
  for f in "$CLUSTER_DIR"/saved/*.cmdline; do
    [ -f "$f" ] || continue
    c=$(basename "$f" .cmdline)
    pid=$(cat "$CLUSTER_DIR/pids/$c.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then continue; fi
    start_saved "$c"
  done
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  restart) shift; cmd_restart "$@" ;;
  revive) cmd_revive ;;
  *) echo "usage: $0 up|down|env|restart COMPONENT [DOWN_SECONDS]|revive" >&2; exit 2 ;;
esac
