#!/usr/bin/env bash
# A real node for the tests: kubelet (built from k8s.io/kubernetes at the control plane's version
# by hack/tools.sh) + containerd + runc + CNI bridge, joined to a local control plane of
# hack/cluster.sh, running real containers from local images (hack/images.sh; no registry).
#
#   hack/node.sh check    can this machine run the node? Names what is missing; exit 3 if not
#   hack/node.sh deps     install the Debian packages the node needs (apt-get), when missing
#   hack/node.sh up       start it all (removing leftovers of an earlier run first)
#   hack/node.sh down     stop everything by PID and remove what 'up' made (idempotent)
#   hack/node.sh status   what runs, node condition, memory
#   hack/node.sh env      'export KUBECONFIG=...' etc. for eval (the API server is only reachable
#                         inside the node's network namespace: use 'exec')
#   hack/node.sh exec CMD...   run CMD in the node's network namespace (kubectl, helm, tests)
#   hack/node.sh images   rebuild the operator image from SSO_OPERATOR_BIN and import it (node up)
#   hack/node.sh registry HOST:PORT   let containerd pull from the plain-HTTP registry at HOST:PORT
#                         in the node's network namespace (hack/registry.sh with
#                         SSO_REGISTRY_NETNS_PID): writes its hosts.toml (no restart needed)
#
# Design. Everything runs in one private mount + network namespace, held by a sleeping process
# (PID in $NODE_DIR/ns.pid): inside it, hack/cluster.sh's kwok control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller with one fake node),
# containerd and the kubelet. The control plane runs inside because the API server must reach
# pod IPs (webhooks through a Service, with --enable-aggregator-routing=true; there is no
# kube-proxy) and the kubelet (logs, exec), and pods must reach the API server: one iptables
# DNAT rule in the namespace maps the `kubernetes` Service IP to the API server, the only
# ClusterIP anything here dials. The host keeps its interfaces, routes, iptables rules, mounts
# and sysctls: /run, /var/lib and /var/log are private mounts, and the three global sysctls the
# kubelet writes are shadowed by files bind-mounted over them. What the host sees: processes,
# files under $NODE_DIR, and cgroup directories /sys/fs/cgroup/*/<cgroup root> (the kubelet's
# --cgroup-root, unique per state directory) while the node runs.
#
# The node is not managed by kwok (cluster.sh runs kwok with an annotation selector that only
# matches its fake nodes), has the label and NoSchedule taint sidecarset-operator.io/real-node=true
# (pods meant for kwok nodes never land on it; real-node tests tolerate and select it).
#
# Machine: Linux, root, cgroup v1 (cpu, cpuacct, cpuset, memory, pids, devices, freezer) or v2
# (cpu, cpuset, memory, pids), kernel with network namespaces, veth, bridge, overlayfs and
# iptables nat; Go for the kubelet build; Debian (or apt-get) for the packages, or them installed.
# Measured on cgroup v1 (hybrid layout) with containerd 1.6.20 and runc 1.1.5 (Debian 12).
#
# Env: SSO_WORK (default <repo>/.local), SSO_NODE_DIR (default $SSO_WORK/node), SSO_NODE_NAME
# (default sso-real-node), SSO_TIMEOUT (default 180), SSO_NODE_NO_INSTALL=1 (never apt-get),
# SSO_OPERATOR_BIN (the binary of the operator image; default target/debug/sidecarset-operator),
# SSO_KEEP_ON_FAILURE=1 (leave a node whose 'up' failed running).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${SSO_WORK:-$REPO/.local}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
NODE_DIR=${SSO_NODE_DIR:-$WORK/node}
NODE_NAME=${SSO_NODE_NAME:-sso-real-node}
TIMEOUT=${SSO_TIMEOUT:-180}
NODE_IP=10.250.0.1
POD_CIDR=10.251.0.0/24
SERVICE_CIDR=10.0.0.0/24 # kube-apiserver's default, set explicitly by cluster.sh for the real node
KUBERNETES_SVC_IP=10.0.0.1
TAINT_KEY=sidecarset-operator.io/real-node
CLUSTER_NAME=sso-node
CLUSTER_WORK=$NODE_DIR/cluster
KUBECONFIG_FILE=$CLUSTER_WORK/kubeconfig
IMG_DIR=$NODE_DIR/img
RUN=$NODE_DIR/run
CTR_SOCK=$RUN/containerd.sock
PIDS=$NODE_DIR/pids
LOGS=$NODE_DIR/logs
CGROUP_ROOT=sso-node-$(printf '%s' "$NODE_DIR" | sha256sum | cut -c1-8)
TEST_REPO=localhost/sso-e2e
OPERATOR_IMAGE=${SSO_OPERATOR_IMAGE:-localhost/sidecarset-operator:e2e}
DEBIAN_PACKAGES=(containerd runc containernetworking-plugins busybox-static umoci skopeo iptables iproute2 ca-certificates util-linux)

log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] error: %s\n' "$*" >&2; exit 1; }
T0=$(date +%s.%N)
el() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------------
# check / deps

# missing_packages: the Debian packages whose files are not there
missing_packages() {
  local m=()
  command -v containerd >/dev/null || m+=(containerd)
  [ -x /usr/sbin/runc ] || command -v runc >/dev/null || m+=(runc)
  { [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ]; } || m+=(containernetworking-plugins)
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || m+=(busybox-static)
  command -v umoci >/dev/null || m+=(umoci)
  command -v skopeo >/dev/null || m+=(skopeo)
  command -v iptables >/dev/null || m+=(iptables)
  command -v ip >/dev/null || m+=(iproute2)
  [ -s /etc/ssl/certs/ca-certificates.crt ] || m+=(ca-certificates)
  { command -v unshare >/dev/null && command -v nsenter >/dev/null; } || m+=(util-linux)
  echo "${m[@]}"
}

cmd_deps() {
  local missing
  missing=$(missing_packages)
  [ -n "$missing" ] || { log "Debian packages present: ${DEBIAN_PACKAGES[*]}"; return 0; }
  [ "${SSO_NODE_NO_INSTALL:-0}" != 1 ] || die "missing packages: $missing (SSO_NODE_NO_INSTALL=1: not installing)"
  [ "$(id -u)" = 0 ] || die "missing packages: $missing (installing them needs root)"
  command -v apt-get >/dev/null || die "missing packages: $missing (no apt-get on this machine: install them by hand)"
  log "installing Debian packages: $missing"
  local t=$SECONDS
  # shellcheck disable=SC2086
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; } >"$WORK/node-apt.log" 2>&1 \
    || { tail -n 20 "$WORK/node-apt.log" >&2; die "apt-get install $missing failed (log: $WORK/node-apt.log)"; }
  missing=$(missing_packages)
  [ -z "$missing" ] || die "still missing after apt-get: $missing"
  log "packages installed in $((SECONDS - t)) s"
}

# problems: one line per reason this machine cannot run the node (empty: it can). Package gaps
# are not problems when they can be installed.
problems() {
  local p=() c missing
  if [ "$(uname -s)" != Linux ]; then echo "not Linux ($(uname -s)): the node needs Linux namespaces and cgroups"; return; fi
  [ "$(id -u)" = 0 ] || p+=("not root (uid $(id -u)): the node needs root for namespaces, mounts, cgroups and containerd")
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    for c in cpu cpuset memory pids; do
      grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || p+=("cgroup v2 controller '$c' is not available (/sys/fs/cgroup/cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers))")
    done
  else
    for c in cpu cpuacct cpuset memory pids devices freezer; do
      awk -v c="$c" '$3 == "cgroup" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) f = 1 } END { exit !f }' /proc/mounts \
        || p+=("cgroup v1 controller '$c' is not mounted (no cgroup v2 at /sys/fs/cgroup either)")
    done
  fi
  grep -qw overlay /proc/filesystems || p+=("the kernel has no overlay filesystem (containerd's overlayfs snapshotter needs it)")
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    if ! unshare --mount --net --propagation private -- true 2>/dev/null; then
      p+=("cannot create mount and network namespaces (unshare --mount --net failed: $(unshare --mount --net true 2>&1 | head -n1))")
    else
      unshare --net -- ip link add sso-a type veth peer name sso-b >/dev/null 2>&1 || p+=("the kernel cannot create veth pairs")
      unshare --net -- ip link add sso-br type bridge >/dev/null 2>&1 || p+=("the kernel cannot create bridges")
      if command -v iptables >/dev/null; then
        unshare --net -- iptables -t nat -L >/dev/null 2>&1 || p+=("iptables nat does not work in a network namespace: $(unshare --net -- iptables -t nat -L 2>&1 | tail -n1)")
      fi
    fi
  fi
  missing=$(missing_packages)
  if [ -n "$missing" ] && { [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || [ "${SSO_NODE_NO_INSTALL:-0}" = 1 ]; }; then
    p+=("missing packages that cannot be installed here: $missing")
  fi
  if ! command -v go >/dev/null; then
    local cache=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/bin}
    [ -x "$cache/kubernetes-${K8S_VERSION:-v1.36.3}/kubelet" ] || p+=("no Go toolchain to build the kubelet (and none cached)")
  fi
  [ ${#p[@]} = 0 ] || printf '%s\n' "${p[@]}"
}

cmd_check() {
  local p
  p=$(problems)
  if [ -n "$p" ]; then
    printf '[node] this machine cannot run the real node:\n' >&2
    printf '%s\n' "$p" | sed 's/^/[node]   - /' >&2
    exit 3
  fi
  log "this machine can run the real node ($(cgroup_version), kernel $(uname -r))"
}

cgroup_version() { if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "cgroup v2"; else echo "cgroup v1"; fi; }

# ---------------------------------------------------------------------------------------------
# namespace helpers

ns_pid() { [ -s "$NODE_DIR/ns.pid" ] && cat "$NODE_DIR/ns.pid"; }
# The holder is alive and is the process whose namespace we recorded.
ns_alive() {
  local p
  p=$(ns_pid) || return 1
  [ -e "/proc/$p/ns/net" ] && [ "$(readlink "/proc/$p/ns/net")" = "$(cat "$NODE_DIR/ns.net" 2>/dev/null)" ]
}
inns() { nsenter -t "$(ns_pid)" -m -n -- "$@"; }
innet() { nsenter -t "$(ns_pid)" -n -- "$@"; }

# start NAME CMD...: CMD inside the namespace, detached, log in logs/NAME.log, PID in pids/NAME.pid
start() {
  local name=$1
  shift
  rm -f "$PIDS/$name.pid"
  # (fd 7, the lock of up/down, is not inherited: the daemon would hold the lock)
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  nsenter -t "$(ns_pid)" -m -n -- setsid /bin/sh -c 'echo $$ > "$0"; exec "$@"' "$PIDS/$name.pid" "$@" \
    </dev/null >"$LOGS/$name.log" 2>&1 7>&- &
  for _ in $(seq 50); do [ -s "$PIDS/$name.pid" ] && return 0; sleep 0.1; done
  die "$name did not start (log: $LOGS/$name.log)"
}

# stop NAME...: SIGTERM, then SIGKILL after 10 s, by the PID in pids/NAME.pid
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

# PIDs of the processes in our network or mount namespace (other than the holder), or in the
# kubelet's cgroups (the containers, each in its own namespaces).
ns_pids() {
  local net mnt p holder
  net=$(cat "$NODE_DIR/ns.net" 2>/dev/null || true)
  mnt=$(cat "$NODE_DIR/ns.mnt" 2>/dev/null || true)
  holder=$(ns_pid || true)
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = "$holder" ] && continue
    { [ -n "$net" ] && [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$net" ]; } \
      || { [ -n "$mnt" ] && [ "$(readlink "/proc/$p/ns/mnt" 2>/dev/null)" = "$mnt" ]; } && echo "$p"
  done
  cgroup_dirs | while read -r d; do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done
}

cgroup_dirs() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    [ -d "/sys/fs/cgroup/$CGROUP_ROOT" ] && echo "/sys/fs/cgroup/$CGROUP_ROOT"
  else
    local d
    for d in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do [ -d "$d" ] && echo "$d"; done
  fi
  return 0
}

make_cgroups() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    local c
    # cgroup v2: the controllers the kubelet needs must be enabled for the root's children.
    for c in cpu cpuset memory pids io hugetlb; do
      grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || continue
      grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
    done
    mkdir -p "/sys/fs/cgroup/$CGROUP_ROOT"
  else
    local h
    for h in /sys/fs/cgroup/*/; do
      h=${h%/}
      [ -f "$h/cgroup.procs" ] || continue
      mkdir -p "$h/$CGROUP_ROOT"
      if [ -f "$h/cpuset.cpus" ]; then
        cat "$h/cpuset.cpus" >"$h/$CGROUP_ROOT/cpuset.cpus"
        cat "$h/cpuset.mems" >"$h/$CGROUP_ROOT/cpuset.mems"
      fi
    done
  fi
}

remove_cgroups() {
  local d
  cgroup_dirs | while read -r d; do find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true; done
  return 0
}

# ---------------------------------------------------------------------------------------------
# down

cmd_down() {
  exec 7>"$WORK/.node.lock"
  flock -w "$TIMEOUT" 7 || die "another hack/node.sh holds $WORK/.node.lock"
  if ! [ -s "$NODE_DIR/ns.pid" ] && [ -z "$(ns_pids)" ] && [ -z "$(cgroup_dirs)" ]; then
    log "the node is not running; nothing to do"
    return 0
  fi
  local pids p
  stop kubelet
  if ns_alive && [ -s "$KUBECONFIG_FILE" ]; then
    innet env SSO_WORK="$CLUSTER_WORK" SSO_CLUSTER_NAME=$CLUSTER_NAME "$REPO/hack/cluster.sh" down 7>&- || log "hack/cluster.sh down failed; killing what is left"
  fi
  stop containerd
  # Whatever is left (containers, shims, control plane): killed by PID.
  for _ in 1 2 3; do
    pids=$(ns_pids | sort -u | tr '\n' ' ')
    [ -n "${pids// /}" ] || break
    log "killing what is left in the node's namespaces and cgroups: $pids"
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.5
  done
  if p=$(ns_pid) && kill -0 "$p" 2>/dev/null && [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$(cat "$NODE_DIR/ns.net" 2>/dev/null)" ]; then
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    log "stopped the namespace holder ($p)"
  fi
  rm -f "$NODE_DIR/ns.pid"
  remove_cgroups
  pids=$(ns_pids | sort -u | tr '\n' ' ')
  [ -z "${pids// /}" ] || die "processes still running after down: $pids"
  [ -z "$(cgroup_dirs)" ] || die "cgroups left after down: $(cgroup_dirs | tr '\n' ' ')"
  rm -f "$NODE_DIR/ns.net" "$NODE_DIR/ns.mnt"
  # The mount namespace is gone, so these are plain directories now.
  rm -rf "$NODE_DIR/containerd" "$NODE_DIR/kubelet" "$NODE_DIR/varlib" "$NODE_DIR/varlog" "$NODE_DIR/run" "$PIDS"
  log "node stopped; nothing of it runs"
}

# ---------------------------------------------------------------------------------------------
# up

write_configs() {
  mkdir -p "$NODE_DIR/etc" "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam" "$NODE_DIR/pod-logs"
  cat >"$NODE_DIR/etc/containerd.toml" <<EOF
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$TEST_REPO/pause:1"
  # Machines without CAP_SYS_RESOURCE cannot lower oom_score_adj (CRI asks -998 for sandboxes):
  # clamp every requested value to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc || echo /usr/sbin/runc)"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
  # Registry host configuration (a hosts.toml per registry, read at each pull): empty unless
  # 'hack/node.sh registry HOST:PORT' trusts the local registry. Other names are pulled as
  # before (HTTPS, and nothing is reachable from here).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$NODE_DIR/etc/certs.d"
EOF
  rm -rf "$NODE_DIR/etc/certs.d"
  mkdir -p "$NODE_DIR/etc/certs.d"
  cat >"$NODE_DIR/cni/net.d/10-sso.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "sso",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "ssocni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE_DIR/cni/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
EOF
  local cgv1=false
  [ -f /sys/fs/cgroup/cgroup.controllers ] || cgv1=true
  cat >"$NODE_DIR/etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# kubelet >= 1.35 refuses cgroup v1 unless told otherwise
failCgroupV1: $( $cgv1 && echo false || echo true )
# containerd 1.6 has no RuntimeConfig CRI call: kubelet 1.36 falls back to this value
cgroupDriver: cgroupfs
# pods go under /$CGROUP_ROOT (unique to this state directory), never /kubepods of the host
cgroupRoot: /$CGROUP_ROOT
containerRuntimeEndpoint: unix://$CTR_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $CLUSTER_WORK/kwok/clusters/$CLUSTER_NAME/pki/ca.crt}
authorization:
  mode: AlwaysAllow
registerWithTaints:
- {key: $TAINT_KEY, value: "true", effect: NoSchedule}
failSwapOn: false
# the kubelet would write vm.overcommit_memory, kernel.panic and kernel.panic_on_oops: they are
# shadowed inside the namespace
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
podLogsDir: $NODE_DIR/pod-logs
rotateCertificates: false
serverTLSBootstrap: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
# status updates every 2 s (default 10 s) so the tests see the kubelet's view sooner
nodeStatusUpdateFrequency: 2s
EOF
}

make_namespace() {
  mkdir -p "$NODE_DIR/varlog" "$NODE_DIR/varlib" "$NODE_DIR/fakesys" "$RUN" "$PIDS" "$LOGS"
  rm -f "$NODE_DIR/ns.pid"
  setsid unshare --mount --net --propagation private -- /bin/sh -c "echo \$\$ > '$NODE_DIR/ns.pid'; exec sleep infinity" \
    </dev/null >/dev/null 2>&1 7>&- &
  for _ in $(seq 50); do [ -s "$NODE_DIR/ns.pid" ] && break; sleep 0.1; done
  [ -s "$NODE_DIR/ns.pid" ] || die "the namespace holder did not start"
  local ns
  ns=$(ns_pid)
  for _ in $(seq 50); do [ "$(readlink "/proc/$ns/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break; sleep 0.1; done
  readlink "/proc/$ns/ns/net" >"$NODE_DIR/ns.net"
  readlink "/proc/$ns/ns/mnt" >"$NODE_DIR/ns.mnt"
  nsenter -t "$ns" -m -n -- /bin/sh -eu -c "
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /run/lock /run/netns /run/containerd
    ln -s /dev/shm /run/shm
    mount --bind '$NODE_DIR/varlog' /var/log
    mount --bind '$NODE_DIR/varlib' /var/lib
    # global (not namespaced) sysctls the kubelet writes: plain files over them, in here only
    for f in vm/overcommit_memory kernel/panic kernel/panic_on_oops; do
      g='$NODE_DIR/fakesys/'\$(echo \$f | tr / _); cat /proc/sys/\$f > \$g; mount --bind \$g /proc/sys/\$f
    done
    ip link set lo up
    # the node's address: a veth pair inside the namespace (some kernels have no dummy driver)
    ip link add sso0 type veth peer name sso1
    ip link set sso1 up
    ip addr add $NODE_IP/24 dev sso0
    ip link set sso0 up
    ip route add default dev sso0
  "
  log "$(el) s  namespace holder $ns ($(cat "$NODE_DIR/ns.net"))"
}

import_images() {
  local t
  for t in pause busybox-v1 busybox-v2 busybox-v3 hot-v1 hot-v2 hot-v3 hot-empty; do
    inns ctr --address "$CTR_SOCK" -n k8s.io images import "$IMG_DIR/$t.tar" >/dev/null
  done
  inns ctr --address "$CTR_SOCK" -n k8s.io images tag "$TEST_REPO/busybox:v2" "$TEST_REPO/busybox:v2-alias" >/dev/null
  if [ -s "$IMG_DIR/operator.tar" ]; then
    inns ctr --address "$CTR_SOCK" -n k8s.io images import "$IMG_DIR/operator.tar" >/dev/null
  fi
}

build_images() {
  local stamp
  stamp=$(sha256sum "$REPO/hack/images.sh" /bin/busybox | sha256sum | cut -c1-16)
  if [ "$(cat "$IMG_DIR/test.stamp" 2>/dev/null)" != "$stamp" ] || ! [ -s "$IMG_DIR/hot-empty.tar" ]; then
    "$REPO/hack/images.sh" test "$IMG_DIR"
    # The image IDs the kubelet reports (containerd: the config digest), for the tests.
    "$REPO/hack/images.sh" ids "$IMG_DIR"
    echo "$stamp" >"$IMG_DIR/test.stamp"
  fi
  local bin=${SSO_OPERATOR_BIN:-$REPO/target/debug/sidecarset-operator}
  if [ -x "$bin" ]; then
    if [ "$(cat "$IMG_DIR/operator.tar.bin-sha256" 2>/dev/null)" != "$(sha256sum "$bin" | cut -d' ' -f1)" ] \
       || [ "$REPO/hack/images.sh" -nt "$IMG_DIR/operator.tar" ]; then
      SSO_OPERATOR_IMAGE=$OPERATOR_IMAGE "$REPO/hack/images.sh" operator "$bin" "$IMG_DIR"
    fi
  else
    log "no $bin: the operator image is not built (cargo build --bin sidecarset-operator)"
  fi
}

kube() { innet "$KUBECTL" --kubeconfig="$KUBECONFIG_FILE" --request-timeout=10s "$@"; }

UP_DONE=0
on_up_exit() {
  local rc=$?
  [ "$UP_DONE" = 1 ] && return 0
  log "'up' failed (exit $rc)"
  local f
  for f in containerd kubelet; do
    [ -s "$LOGS/$f.log" ] && { log "---- last lines of $LOGS/$f.log"; tail -n 15 "$LOGS/$f.log" >&2; }
  done
  if [ "${SSO_KEEP_ON_FAILURE:-0}" = 1 ]; then
    log "SSO_KEEP_ON_FAILURE=1: leaving it running; remove it with 'hack/node.sh down'"
  else
    cmd_down || true
  fi
  exit "$rc"
}

cmd_up() {
  local p tools
  p=$(problems)
  if [ -n "$p" ]; then
    printf '[node] this machine cannot run the real node:\n' >&2
    printf '%s\n' "$p" | sed 's/^/[node]   - /' >&2
    exit 3
  fi
  cmd_deps
  # Tools are built (or found in the cache) out here: inside the namespace there is no network.
  log "locating tools (hack/tools.sh all kubelet; builds them on the first run)"
  tools=$("$REPO/hack/tools.sh" all kubelet) || die "hack/tools.sh failed"
  eval "$tools"
  KUBELET=$KUBELET_BIN/kubelet
  [ -x "$KUBELET" ] || die "$KUBELET is missing after hack/tools.sh"
  build_images
  log "$(el) s  tools and images ready"

  [ -s "$NODE_DIR/ns.pid" ] || [ -n "$(cgroup_dirs)" ] && { log "removing leftovers of an earlier node"; cmd_down; }
  exec 7>"$WORK/.node.lock"
  flock -n 7 || die "another hack/node.sh holds $WORK/.node.lock"
  trap on_up_exit EXIT
  rm -rf "$NODE_DIR/containerd" "$NODE_DIR/kubelet" "$NODE_DIR/cni/ipam" "$NODE_DIR/pod-logs" "$NODE_DIR/varlog" \
    "$NODE_DIR/varlib" "$RUN" "$PIDS" "$LOGS"
  mkdir -p "$NODE_DIR/containerd" "$NODE_DIR/kubelet"
  make_namespace

  log "$(el) s  starting the control plane in the namespace (hack/cluster.sh up)"
  # The API server: webhooks and conversion go to endpoint IPs (no kube-proxy), the kubelet is
  # reached at its InternalIP with kwok's admin certificate, pods reach it at the kubernetes
  # Service IP (in its certificate); nothing in 10/8 or *.svc goes through cluster.sh's dead proxy.
  local pki=$CLUSTER_WORK/kwok/clusters/$CLUSTER_NAME/pki
  innet env SSO_WORK="$CLUSTER_WORK" SSO_CLUSTER_NAME=$CLUSTER_NAME SSO_NODES=1 SSO_BIND_ADDRESS=0.0.0.0 \
    SSO_APISERVER_EXTRA_ARGS="enable-aggregator-routing=true kubelet-preferred-address-types=InternalIP service-cluster-ip-range=$SERVICE_CIDR kubelet-client-certificate=$pki/admin.crt kubelet-client-key=$pki/admin.key" \
    SSO_APISERVER_CERT_SANS="$KUBERNETES_SVC_IP,$NODE_IP" SSO_NO_PROXY_EXTRA=10.0.0.0/8,.svc,.cluster.local \
    "$REPO/hack/cluster.sh" up 7>&- || die "hack/cluster.sh up failed in the namespace"
  KUBECTL=$CLUSTER_WORK/bin/kubectl
  log "$(el) s  control plane up"

  # A one-rule kube-proxy: the kubernetes Service's IP to the API server (pods' in-cluster config).
  local ep
  ep=$(kube get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')
  [ "$(kube get svc kubernetes -n default -o jsonpath='{.spec.clusterIP}')" = "$KUBERNETES_SVC_IP" ] \
    || die "the kubernetes Service does not have the IP $KUBERNETES_SVC_IP"
  inns iptables -t nat -A PREROUTING -d "$KUBERNETES_SVC_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$ep"
  inns iptables -t nat -A OUTPUT -d "$KUBERNETES_SVC_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$ep"

  write_configs
  make_cgroups
  start containerd env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy containerd --config "$NODE_DIR/etc/containerd.toml"
  for _ in $(seq 100); do inns ctr --address "$CTR_SOCK" version >/dev/null 2>&1 && break; sleep 0.1; done
  inns ctr --address "$CTR_SOCK" version >/dev/null 2>&1 || die "containerd did not start (log: $LOGS/containerd.log)"
  import_images
  log "$(el) s  containerd up, images imported"

  start kubelet "$KUBELET" --config="$NODE_DIR/etc/kubelet.yaml" --kubeconfig="$KUBECONFIG_FILE" \
    --root-dir="$NODE_DIR/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="$TAINT_KEY=true" --v="${SSO_KUBELET_V:-2}"
  local deadline=$((SECONDS + TIMEOUT))
  until [ "$(kube get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
    kill -0 "$(cat "$PIDS/kubelet.pid")" 2>/dev/null || die "the kubelet exited (log: $LOGS/kubelet.log)"
    ((SECONDS < deadline)) || die "node $NODE_NAME not Ready after ${TIMEOUT}s (log: $LOGS/kubelet.log)"
    sleep 0.2
  done
  [ -z "$(kube get node "$NODE_NAME" -o jsonpath='{.metadata.annotations.kwok\.x-k8s\.io/node}')" ] || die "kwok manages $NODE_NAME"
  log "$(el) s  node $NODE_NAME Ready"

  # Smoke test: a real container runs and logs.
  local pod=sso-node-smoke
  kube apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $pod, namespace: default}
spec:
  nodeSelector: {$TAINT_KEY: "true"}
  tolerations: [{key: $TAINT_KEY, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: $TEST_REPO/busybox:v1
    command: [sh, -c, 'echo smoke \$(cat /etc/image-version); exec sleep 3600']
EOF
  kube wait --for=condition=Ready "pod/$pod" --timeout="${TIMEOUT}s" >/dev/null || { kube describe pod "$pod" >&2; die "the smoke pod did not become Ready"; }
  [ "$(kube logs "$pod")" = "smoke v1" ] || die "the smoke pod logged '$(kube logs "$pod")', not 'smoke v1'"
  kube delete pod "$pod" --wait=true >/dev/null
  UP_DONE=1
  trap - EXIT
  exec 7>&-
  log "$(el) s  node $NODE_NAME runs containers (smoke pod logged 'smoke v1')"
  log "use it with: hack/node.sh exec kubectl get pods -A   (kubeconfig $KUBECONFIG_FILE)"
}

# ---------------------------------------------------------------------------------------------

cmd_status() {
  if ! ns_alive; then
    log "not running"
    [ -z "$(ns_pids)" ] || log "but processes of it are left: $(ns_pids | tr '\n' ' ') (hack/node.sh down)"
    return 1
  fi
  local n p rss
  log "namespace holder $(ns_pid) ($(cat "$NODE_DIR/ns.net")), cgroup root /$CGROUP_ROOT"
  for p in $(ns_pids | sort -un); do
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
    n=$({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | cut -c1-60)
    printf '[node]   %7s %7s MiB  %s\n' "$p" "$((rss / 1024))" "$n" >&2
  done
  # RSS of the control plane (cluster.sh's processes) and of the node (kubelet, containerd, shims,
  # containers).
  local cp=0 nd=0
  for p in $(ns_pids | sort -un); do
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
    if { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qF "$CLUSTER_WORK/"; then cp=$((cp + ${rss:-0})); else nd=$((nd + ${rss:-0})); fi
  done
  printf '[node]   RSS: control plane %d MiB, node (kubelet, containerd, shims, containers) %d MiB\n' $((cp / 1024)) $((nd / 1024)) >&2
  KUBECTL=$CLUSTER_WORK/bin/kubectl
  kube get nodes -o wide >&2 || true
}

cmd_env() {
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
  printf 'export SSO_NODE_NAME=%q\n' "$NODE_NAME"
  printf 'export SSO_NODE_NS_PID=%q\n' "$(ns_pid || true)"
  printf 'export SSO_NODE_KUBECTL=%q\n' "$CLUSTER_WORK/bin/kubectl"
  printf 'export SSO_E2E_REAL_NODE=%q\n' "$NODE_NAME"
  printf 'export SSO_E2E_IMAGE_IDS=%q\n' "$IMG_DIR/image-ids"
  printf 'export SSO_OPERATOR_IMAGE=%q\n' "$OPERATOR_IMAGE"
}

cmd_exec() {
  ns_alive || die "the node is not running (hack/node.sh up)"
  [ $# -gt 0 ] || die "usage: hack/node.sh exec CMD..."
  [ "$1" = kubectl ] && { shift; set -- "$CLUSTER_WORK/bin/kubectl" "$@"; }
  KUBECONFIG=$KUBECONFIG_FILE SSO_NODE_NAME=$NODE_NAME SSO_E2E_REAL_NODE=$NODE_NAME SSO_E2E_IMAGE_IDS=$IMG_DIR/image-ids \
    exec nsenter -t "$(ns_pid)" -n -- "$@"
}

cmd_images() {
  ns_alive || die "the node is not running (hack/node.sh up)"
  build_images
  import_images
  log "images imported into the node's containerd"
}

# registry HOST:PORT: containerd pulls HOST:PORT/... over plain HTTP (the registry of
# hack/registry.sh in this namespace). containerd reads hosts.toml at every pull.
cmd_registry() {
  local addr=${1:?usage: hack/node.sh registry HOST:PORT}
  ns_alive || die "the node is not running (hack/node.sh up)"
  [[ $addr =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] || die "expected HOST:PORT, not '$addr'"
  mkdir -p "$NODE_DIR/etc/certs.d/$addr"
  cat >"$NODE_DIR/etc/certs.d/$addr/hosts.toml" <<EOF
server = "http://$addr"
[host."http://$addr"]
  capabilities = ["pull", "resolve"]
EOF
  log "containerd pulls $addr/... over plain HTTP ($NODE_DIR/etc/certs.d/$addr/hosts.toml)"
}

case ${1:-} in
  check) cmd_check ;;
  registry) shift; cmd_registry "$@" ;;
  deps) cmd_deps ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  exec) shift; cmd_exec "$@" ;;
  images) cmd_images ;;
  *) echo "usage: $0 check|deps|up|down|status|env|exec CMD...|images|registry HOST:PORT" >&2; exit 2 ;;
esac
