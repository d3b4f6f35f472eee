#!/usr/bin/env bash
# kind's node image built on this machine, without a container registry:
#
#   hack/kind-node.sh build   build it into the Docker daemon of DOCKER_HOST (hack/kind-docker.sh)
#                             unless it is there already; prints its name on stdout
#   hack/kind-node.sh image   the name of the image (on stdout) when that daemon has it; exit 1 if not
#   hack/kind-node.sh name    the name it has (or would have)
#   hack/kind-node.sh rootfs  only the (cached) Debian root filesystems
#
# The image follows kind's node layout (kind v0.33.0's images/base and `kind build node-image`):
#   - a Debian bookworm root filesystem (mmdebstrap; bookworm's systemd 252 still boots on this
#     machine's cgroup v1, trixie's refuses) with kind's packages, and Debian's containerd 1.6, runc
#     and CNI plugins in the places kind's units and scripts expect them;
#   - kind's own files (entrypoint, units, containerd config, ...), taken from the kind module in
#     the Go module cache at build time, and the systemd changes of kind's base Dockerfile;
#   - kubeadm, kubelet, kubectl of K8S_VERSION (hack/tools.sh kind-k8s), /kind/version, and kind's
#     kindnet manifest as /kind/manifests/default-cni.yaml;
#   - preloaded in containerd's k8s.io namespace, with the tags kubeadm asks for
#     (`kubeadm config images list`): kube-apiserver, kube-controller-manager, kube-scheduler,
#     kube-proxy (binaries from scratch; kube-proxy on a small bookworm with iptables), etcd (the
#     version kubeadm names, hack/tools.sh etcd), CoreDNS (COREDNS_VERSION, tagged as kubeadm's:
#     the proxy does not serve kubeadm's own), pause (built from the kubernetes module's pause.c;
#     also tagged as kind's sandbox_image), and kindnetd (hack/kind-cni.sh under kind's tag).
# What differs from kind's images, for this machine:
#   - containerd: restrict_oom_score_adj = true (no CAP_SYS_RESOURCE here: runc cannot lower
#     oom_score_adj, every pod sandbox would fail);
#   - kubelet: --fail-cgroupv1=false (Kubernetes >= 1.35 refuses cgroup v1 otherwise);
#   - sysctls that are global (not per network namespace) and that systemd (fs.file-max,
#     fs.nr_open) and the kubelet (vm.overcommit_memory, kernel.panic, ...) write at start are
#     shadowed in the node's mount namespace by /usr/local/bin/sso-entrypoint, so that the host keeps
#     its values; Debian's sysctl.d defaults (kernel.pid_max, ...) are removed;
#   - no local-path-provisioner (kind then installs a host-path StorageClass; no test uses a PVC).
# kind's `kind build node-image` is not used: it fetches every image that its kubernetes
# tarball does not carry from a registry, and its import needs containerd 2's `ctr --label`; its
# final steps (binaries, /kind/version, the manifests, `ctr images import --all-platforms
# --no-unpack --digests` into a running node container, `docker commit`) are repeated here.
#
# The image is named sidecarset-operator/kind-node:<K8S_VERSION>-<key>; the key is a hash of this
# script, hack/kind-cni.sh and the versions, so a change rebuilds it. The Docker daemon keeps it
# between runs; the root filesystems (mmdebstrap tarballs) are cached in
# ~/.cache/sidecarset-operator/kind-node. Needs root, mmdebstrap, gcc (static libc), jq.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.36.3}
KIND_VERSION=${KIND_VERSION:-v0.33.0}
CACHE=${SSO_KIND_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/kind-node}
SUITE=bookworm
NODE_PKGS=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,e2fsprogs,bash,ca-certificates,curl,jq,procps,containerd,runc,containernetworking-plugins
TOOLS_PKGS=iptables,nftables,conntrack,iproute2,kmod,curl,ca-certificates,jq
# Global sysctls shadowed inside the node (see above)
SHADOW_SYSCTLS="fs/file-max fs/nr_open kernel/pid_max vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"

log() { printf '[kind-node] %s\n' "$*" >&2; }
die() { printf '[kind-node] error: %s\n' "$*" >&2; exit 1; }

key() {
  cat "${BASH_SOURCE[0]}" "$REPO/hack/kind-cni.sh" | { cat; echo "$K8S_VERSION $KIND_VERSION ${COREDNS_VERSION:-}"; } \
    | sha256sum | cut -c1-12
}
name() { echo "sidecarset-operator/kind-node:$K8S_VERSION-$(key)"; }

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# rootfs NAME PACKAGES: a cached mmdebstrap tarball of Debian $SUITE (minbase + PACKAGES)
rootfs() {
  local n=$1 pkgs=$2 out h src
  h=$(echo "$SUITE $pkgs" | sha256sum | cut -c1-12)
  out=$CACHE/rootfs-$n-$SUITE-$h.tar
  mkdir -p "$CACHE"
  if [ ! -s "$out" ]; then
    command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
    # the machine's own apt sources (its mirror), for the same suite
    src=$(grep -l -E "^Suites:.*\b$SUITE\b|^deb .* $SUITE " /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -n1 || true)
    [ -n "$src" ] || die "no apt source for $SUITE in /etc/apt (mmdebstrap needs a Debian mirror)"
    log "mmdebstrap $SUITE ($n: $pkgs) from the apt sources in $src"
    local t0=$SECONDS
    mmdebstrap --quiet --format=tar --variant=minbase --include="$pkgs" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      "$SUITE" "$out.tmp.tar" "$src" >&2
    mv "$out.tmp.tar" "$out"
    log "rootfs $n: $(du -h "$out" | cut -f1) in $((SECONDS - t0)) s"
  fi
  echo "$out"
}

# the classic builder (offline; BuildKit is not in Debian's docker.io), without its deprecation notice
dbuild() {
  local rc=0
  DOCKER_BUILDKIT=0 docker build -q "$@" >/dev/null 2>"$CACHE/.dbuild.err" || rc=$?
  grep -vE 'DEPRECATED: The legacy builder|BuildKit is currently disabled|environment-variable\.|^$' "$CACHE/.dbuild.err" >&2 || true
  rm -f "$CACHE/.dbuild.err"
  return "$rc"
}

cmd_build() {
  [ "$(id -u)" = 0 ] || die "needs root"
  docker version >/dev/null 2>&1 || die "no Docker daemon at ${DOCKER_HOST:-the default socket} (hack/kind-docker.sh up)"
  local img t0=$SECONDS
  img=$(name)
  if have_image "$img"; then log "node image $img is there"; echo "$img"; return; fi
  mkdir -p "$CACHE"
  local tools kmod w
  tools=$(cd "$REPO" && hack/tools.sh kind-k8s)
  eval "$tools"
  kmod=$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION
  [ -d "$kmod/images/base/files" ] || go mod download "sigs.k8s.io/kind@$KIND_VERSION"
  [ -d "$kmod/images/base/files" ] || die "kind's module $KIND_VERSION has no images/base/files"

  # ---- the images kubeadm asks for ----------------------------------------------------------
  local list etcd_tag coredns_tag pause_tag sandbox
  list=$("$KIND_K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
  etcd_tag=$(sed -n 's#^registry.k8s.io/etcd:##p' <<<"$list")
  coredns_tag=$(sed -n 's#^registry.k8s.io/coredns/coredns:##p' <<<"$list")
  pause_tag=$(sed -n 's#^registry.k8s.io/pause:##p' <<<"$list")
  sandbox=$(sed -n 's/^[[:space:]]*sandbox_image = "\(.*\)"/\1/p' "$kmod/images/base/files/etc/containerd/config.toml")
  { [ -n "$etcd_tag" ] && [ -n "$coredns_tag" ] && [ -n "$pause_tag" ] && [ -n "$sandbox" ]; } \
    || die "could not read the image tags from kubeadm ($list) or kind's containerd config"
  tools=$(cd "$REPO" && ETCD_VERSION=v${etcd_tag%-*} hack/tools.sh etcd && hack/tools.sh coredns crictl)
  eval "$tools"
  local kindnetd_img
  kindnetd_img=$(sed -n 's/^const kindnetdImage = "\(.*\)"$/\1/p' "$kmod/pkg/build/nodeimage/const_cni.go")
  [ -n "$kindnetd_img" ] || die "kindnetd's image not found in kind's const_cni.go"

  w=$(mktemp -d "$CACHE/build.XXXXXX")
  # shellcheck disable=SC2064 # w is fixed now
  trap "rm -rf '$w'; docker rm -f sso-kind-node-build >/dev/null 2>&1 || true" EXIT

  local tools_tar node_tar
  tools_tar=$(rootfs tools "$TOOLS_PKGS")
  node_tar=$(rootfs node "$NODE_PKGS")

  log "component images"
  mkdir -p "$w/c"
  cp "$KIND_K8S_BIN"/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy} "$ETCD_BIN/etcd" "$COREDNS_BIN/coredns" "$w/c/"
  cp "$REPO/hack/kind-cni.sh" "$w/c/kindnetd"
  gcc -Os -Wall -static -DVERSION="$pause_tag-sso" -o "$w/c/pause" \
    "$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"
  chmod 0755 "$w/c"/*
  ln "$tools_tar" "$w/c/tools.tar" 2>/dev/null || cp "$tools_tar" "$w/c/tools.tar"
  local c refs=()
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$c" "$c" "$c" >"$w/c/Dockerfile.$c"
    dbuild -f "$w/c/Dockerfile.$c" -t "registry.k8s.io/$c:$K8S_VERSION" "$w/c"; refs+=("registry.k8s.io/$c:$K8S_VERSION")
  done
  printf 'FROM scratch\nCOPY etcd /usr/local/bin/etcd\nENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT ["/usr/local/bin/etcd"]\n' >"$w/c/Dockerfile.etcd"
  dbuild -f "$w/c/Dockerfile.etcd" -t "registry.k8s.io/etcd:$etcd_tag" "$w/c"; refs+=("registry.k8s.io/etcd:$etcd_tag")
  printf 'FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n' >"$w/c/Dockerfile.coredns"
  dbuild -f "$w/c/Dockerfile.coredns" -t "registry.k8s.io/coredns/coredns:$coredns_tag" "$w/c"; refs+=("registry.k8s.io/coredns/coredns:$coredns_tag")
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$w/c/Dockerfile.pause"
  dbuild -f "$w/c/Dockerfile.pause" -t "registry.k8s.io/pause:$pause_tag" "$w/c"; refs+=("registry.k8s.io/pause:$pause_tag")
  if [ "$sandbox" != "registry.k8s.io/pause:$pause_tag" ]; then docker tag "registry.k8s.io/pause:$pause_tag" "$sandbox"; refs+=("$sandbox"); fi
  # kube-proxy and kindnetd: a small bookworm with iptables (nft, like the node), iproute2, curl, jq
  printf 'FROM scratch\nADD tools.tar /\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n' >"$w/c/Dockerfile.tools"
  dbuild -f "$w/c/Dockerfile.tools" -t sso-kind-tools:build "$w/c"
  printf 'FROM sso-kind-tools:build\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' >"$w/c/Dockerfile.kube-proxy"
  dbuild -f "$w/c/Dockerfile.kube-proxy" -t "registry.k8s.io/kube-proxy:$K8S_VERSION" "$w/c"; refs+=("registry.k8s.io/kube-proxy:$K8S_VERSION")
  printf 'FROM sso-kind-tools:build\nCOPY kindnetd /bin/kindnetd\nCMD ["/bin/kindnetd"]\n' >"$w/c/Dockerfile.kindnetd"
  dbuild -f "$w/c/Dockerfile.kindnetd" -t "$kindnetd_img" "$w/c"; refs+=("$kindnetd_img")
  docker rmi sso-kind-tools:build >/dev/null
  docker save -o "$w/images.tar" "${refs[@]}"
  log "component images: $(du -h "$w/images.tar" | cut -f1) (${refs[*]})"

  # ---- the node's root filesystem ------------------------------------------------------------
  log "node base image"
  mkdir -p "$w/n/files" "$w/n/bin"
  ln "$node_tar" "$w/n/rootfs.tar" 2>/dev/null || cp "$node_tar" "$w/n/rootfs.tar"
  cp -a "$kmod/images/base/files/." "$w/n/files/"
  chmod -R u+w "$w/n/files"
  # this machine: no CAP_SYS_RESOURCE (oom_score_adj), cgroup v1
  sed -i 's/^\([[:space:]]*restrict_oom_score_adj\) = false/\1 = true/' "$w/n/files/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$w/n/files/etc/containerd/config.toml" || die "kind's containerd config has no restrict_oom_score_adj"
  sed -i 's#^KUBELET_EXTRA_ARGS=.*#& --fail-cgroupv1=false#' "$w/n/files/etc/default/kubelet"
  ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' >"$w/n/files/etc/containerd/cri-base.json"
  cp "$KIND_K8S_BIN"/{kubeadm,kubelet,kubectl} "$CRICTL_BIN/crictl" "$w/n/bin/"
  echo "$K8S_VERSION" >"$w/n/version"
  mkdir -p "$w/n/manifests"
  python3 - "$kmod/pkg/build/nodeimage/const_cni.go" "$kindnetd_img" >"$w/n/manifests/default-cni.yaml" <<'EOF'
import re, sys
src = open(sys.argv[1]).read().replace('` + kindnetdImage + `', sys.argv[2])
m = re.search(r'const defaultCNIManifest = `(.*?)`\n', src, re.S)
print(m.group(1), end='')
EOF
  grep -q "image: $kindnetd_img" "$w/n/manifests/default-cni.yaml" || die "could not take kind's kindnet manifest from const_cni.go"
  cat >"$w/n/sso-entrypoint" <<EOF
#!/bin/sh
# Written by sidecarset-operator's hack/kind-node.sh. Global sysctls (not per namespace) that
# systemd and the kubelet write at start are shadowed in this node's mount namespace, so that the
# host keeps its values: each /proc/sys file gets a plain file with its value bind-mounted over it.
set -e
mkdir -p /kind/sysctl-shadow
for f in $SHADOW_SYSCTLS; do
  [ -e "/proc/sys/\$f" ] || continue
  s=/kind/sysctl-shadow/\$(echo "\$f" | tr / .)
  cat "/proc/sys/\$f" >"\$s"
  mount --bind "\$s" "/proc/sys/\$f"
done
exec "\$@"
EOF
  chmod 0755 "$w/n/sso-entrypoint"
  cat >"$w/n/Dockerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
COPY files/ /
COPY sso-entrypoint /usr/local/bin/sso-entrypoint
COPY bin/kubeadm bin/kubelet bin/kubectl /usr/bin/
COPY bin/crictl /usr/local/bin/crictl
COPY version /kind/version
COPY manifests/ /kind/manifests/
ENV container=docker
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \
 && chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl \
 && ln -sf /usr/bin/containerd /usr/local/bin/containerd \
 && ln -sf /usr/bin/ctr /usr/local/bin/ctr \
 && ln -sf /usr/bin/containerd-shim-runc-v2 /usr/local/bin/containerd-shim-runc-v2 \
 && mkdir -p /opt/cni/bin && for p in host-local loopback ptp portmap; do ln -sf /usr/lib/cni/$p /opt/cni/bin/$p; done \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* \
 && rm -f /etc/systemd/system/*.wants/* \
 && rm -f /lib/systemd/system/local-fs.target.wants/* \
 && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
 && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
 && rm -f /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init \
 && find /usr/lib/sysctl.d /etc/sysctl.d -name '*.conf' ! -name '10-network-*.conf' -exec rm -f {} + \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests \
 && rm -f /etc/machine-id /var/lib/dbus/machine-id && touch /etc/machine-id \
 && /usr/local/bin/containerd --version && runc --version | head -n1 && kubeadm version -o short
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/sso-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  dbuild -t sso-kind-base:build "$w/n"

  # ---- preload the images, as kind's builder does --------------------------------------------
  log "importing the images into the node's containerd"
  docker rm -f sso-kind-node-build >/dev/null 2>&1 || true
  docker run -d --name sso-kind-node-build --privileged --entrypoint=sleep sso-kind-base:build infinity >/dev/null
  docker cp "$w/images.tar" sso-kind-node-build:/images.tar
  docker exec sso-kind-node-build sh -c 'containerd >/tmp/containerd.log 2>&1 & i=0
    until ctr version >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || { cat /tmp/containerd.log; exit 1; }; sleep 0.1; done
    ctr -n k8s.io images import --all-platforms --no-unpack --digests /images.tar
    ctr -n k8s.io images ls -q
    pkill containerd; i=0; while pgrep -x containerd >/dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done
    rm -f /images.tar /tmp/containerd.log; rm -rf /var/lib/containerd/tmpmounts' >"$w/import.log" 2>&1 \
    || { cat "$w/import.log" >&2; die "importing the images failed"; }
  local r missing=()
  for r in "${refs[@]}"; do
    grep -qxF "$r" "$w/import.log" || grep -qxF "docker.io/$r" "$w/import.log" || missing+=("$r")
  done
  [ ${#missing[@]} -eq 0 ] || { cat "$w/import.log" >&2; die "not in the node's containerd: ${missing[*]}"; }
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/sso-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'CMD []' sso-kind-node-build "$img" >/dev/null
  docker rm -f sso-kind-node-build >/dev/null
  docker rmi sso-kind-base:build >/dev/null
  for r in "${refs[@]}"; do docker rmi "$r" >/dev/null 2>&1 || true; done
  docker image prune -f >/dev/null
  log "node image $img built in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "$img" | awk '{printf "%.0f MB", $1/1e6}'))"
  echo "$img"
}

case ${1:-} in
  build) cmd_build ;;
  image) img=$(name); have_image "$img" || exit 1; echo "$img" ;;
  name) name ;;
  rootfs) rootfs tools "$TOOLS_PKGS"; rootfs node "$NODE_PKGS" ;;
  *) die "usage: $0 build|image|name|rootfs" ;;
esac
