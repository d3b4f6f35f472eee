#!/usr/bin/env bash
# A Docker daemon for kind on this machine, in a private network and mount namespace (like the real
# node of hack/node.sh), so that Docker's bridges, iptables rules and mounts never touch the host:
#
#   hack/kind-docker.sh up       install docker.io (apt) when dockerd is missing; start a holder
#                                process in new network + mount namespaces, then containerd and
#                                dockerd inside them, each with its own socket, root and state
#   hack/kind-docker.sh down     stop dockerd and containerd by PID (after removing every container
#                                of this daemon), stop the holder (the namespaces go with it),
#                                remove the socket directory, the cgroups Docker left and the empty
#                                /lib/modules that Docker's `-v /lib/modules:...` creates on a host
#                                without one
#   hack/kind-docker.sh status   whether it runs (exit 0) or not (exit 1)
#   hack/kind-docker.sh env      DOCKER_HOST=... and SSO_KIND_NETNS_PID=... lines, for `eval`
#   hack/kind-docker.sh exec CMD...  CMD inside the network namespace, with DOCKER_HOST set
#
# The daemon's data (images: the kind node image stays there between runs) is under
# SSO_KIND_DOCKER_DATA (default ~/.cache/sidecarset-operator/kind-docker); sockets, pid files and
# logs under SSO_KIND_DOCKER_RUN (default /run/sidecarset-operator-kind).
#
# dockerd runs every container through a runtime wrapper (sso-runc): this machine's capability
# bounding set lacks CAP_SYS_RESOURCE, and `docker run --privileged` (every kind node) asks runc for
# all capabilities, which fails with "unable to apply caps: operation not permitted". The wrapper
# removes CAP_SYS_RESOURCE from every capability set of the bundle's config.json, then execs runc.
# Needs root.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${SSO_KIND_DOCKER_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/kind-docker}
RUN=${SSO_KIND_DOCKER_RUN:-/run/sidecarset-operator-kind}
SOCK=$RUN/docker.sock

log() { printf '[kind-docker] %s\n' "$*" >&2; }
die() { printf '[kind-docker] error: %s\n' "$*" >&2; exit 1; }

pid_of() { [ -s "$RUN/$1.pid" ] && cat "$RUN/$1.pid"; }
alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# inns CMD...: CMD in the holder's network and mount namespaces
inns() { nsenter -t "$(pid_of holder)" -n -m -- "$@"; }

deps() {
  local pkgs=()
  command -v dockerd >/dev/null || pkgs+=(docker.io)
  command -v jq >/dev/null || pkgs+=(jq)
  command -v unshare >/dev/null && command -v nsenter >/dev/null || pkgs+=(util-linux)
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "installing ${pkgs[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >&2 \
      || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >&2; } \
      || die "could not install ${pkgs[*]}"
  fi
  [ -x /usr/sbin/runc ] || [ -x /usr/bin/runc ] || die "runc is missing (Debian package runc)"
}

write_files() {
  mkdir -p "$RUN/bin" "$RUN/exec" "$RUN/containerd-state" "$DATA/docker" "$DATA/containerd"
  local runc
  runc=$(command -v runc || true); [ -n "$runc" ] || runc=/usr/sbin/runc
  cat >"$RUN/bin/sso-runc" <<EOF
#!/bin/sh
# runc without CAP_SYS_RESOURCE (the machine's bounding set lacks it); written by hack/kind-docker.sh
# create/run: the bundle's config.json; exec: the --process file
strip() { # FILE JQ-PATH
  jq -c "(\$2 // {}) |= with_entries(.value |= map(select(. != \\"CAP_SYS_RESOURCE\\")))" "\$1" >"\$1.sso" && mv "\$1.sso" "\$1"
}
bundle=
process=
prev=
for a in "\$@"; do
  case \$prev in --bundle|-b) bundle=\$a ;; --process|-p) process=\$a ;; esac
  case \$a in --bundle=*) bundle=\${a#--bundle=} ;; --process=*) process=\${a#--process=} ;; esac
  prev=\$a
done
if [ -n "\$bundle" ] && [ -f "\$bundle/config.json" ]; then strip "\$bundle/config.json" .process.capabilities; fi
if [ -n "\$process" ] && [ -f "\$process" ]; then strip "\$process" .capabilities; fi
exec $runc "\$@"
EOF
  chmod 0755 "$RUN/bin/sso-runc"
  cat >"$RUN/containerd.toml" <<EOF
version = 2
root = "$DATA/containerd"
state = "$RUN/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[debug]
  address = ""
EOF
  echo '{}' >"$RUN/daemon.json"
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "needs root"
  if cmd_status >/dev/null 2>&1; then log "already running (DOCKER_HOST=unix://$SOCK)"; return 0; fi
  deps
  # leftovers of a run that died: clean them first
  [ ! -e "$RUN/holder.pid" ] || cmd_down
  mkdir -p "$RUN"
  [ -d /lib/modules ] || : >"$RUN/no-lib-modules"
  write_files
  local t0=$SECONDS
  unshare --net --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! >"$RUN/holder.pid"
  for _ in $(seq 50); do
    [ "$(readlink "/proc/$(pid_of holder)/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break; sleep 0.1
  done
  inns ip link set lo up
  # nsenter execs the daemon (no fork without -p): $! is the daemon's PID
  nsenter -t "$(pid_of holder)" -n -m -- containerd --config "$RUN/containerd.toml" </dev/null >"$RUN/containerd.log" 2>&1 &
  echo $! >"$RUN/containerd.pid"
  for _ in $(seq 100); do [ -S "$RUN/containerd.sock" ] && break; alive containerd || break; sleep 0.1; done
  [ -S "$RUN/containerd.sock" ] || { tail -20 "$RUN/containerd.log" >&2; cmd_down; die "containerd did not start"; }
  nsenter -t "$(pid_of holder)" -n -m -- dockerd --config-file "$RUN/daemon.json" -H "unix://$SOCK" --containerd "$RUN/containerd.sock" \
    --data-root "$DATA/docker" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pidfile" \
    --add-runtime "sso-runc=$RUN/bin/sso-runc" --default-runtime sso-runc \
    --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    </dev/null >"$RUN/dockerd.log" 2>&1 &
  echo $! >"$RUN/dockerd.pid"
  for _ in $(seq 300); do
    DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1 && break
    alive dockerd || break; sleep 0.1
  done
  DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1 || { tail -20 "$RUN/dockerd.log" >&2; cmd_down; die "dockerd did not start"; }
  log "dockerd $(DOCKER_HOST=unix://$SOCK docker version -f '{{.Server.Version}}') up in $((SECONDS - t0)) s (pid $(pid_of dockerd), namespaces of pid $(pid_of holder)); DOCKER_HOST=unix://$SOCK"
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "needs root"
  if alive dockerd && [ -S "$SOCK" ]; then
    local ids
    ids=$(DOCKER_HOST=unix://$SOCK docker ps -aq 2>/dev/null || true)
    # shellcheck disable=SC2086 # a list of ids
    [ -z "$ids" ] || { log "removing containers: "$ids; DOCKER_HOST=unix://$SOCK docker rm -f -v $ids >/dev/null 2>&1 || true; }
    DOCKER_HOST=unix://$SOCK docker network prune -f >/dev/null 2>&1 || true
  fi
  local n p
  for n in dockerd containerd; do
    p=$(pid_of "$n") || continue
    if kill -0 "$p" 2>/dev/null; then
      kill "$p"
      for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && { log "$n ($p) did not stop; SIGKILL"; kill -9 "$p"; }
      log "stopped $n ($p)"
    fi
    rm -f "$RUN/$n.pid"
  done
  # shims of our containerd, by the socket in their command line
  local d cmd
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    if [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ]; then continue; fi
    cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
    case $cmd in
      containerd-shim*"$RUN/containerd.sock"*) log "stopping shim $p"; kill -9 "$p" 2>/dev/null || true ;;
    esac
  done
  p=$(pid_of holder) || true
  if [ -n "${p:-}" ] && kill -0 "$p" 2>/dev/null; then kill "$p"; log "stopped the namespace holder ($p)"; fi
  rm -f "$RUN/holder.pid"
  # cgroups of the containers (Docker's cgroupfs driver), empty once they are gone
  local c
  for c in /sys/fs/cgroup/*/docker; do [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  if [ -e "$RUN/no-lib-modules" ] && [ -d /lib/modules ] && [ -z "$(ls -A /lib/modules)" ]; then
    rmdir /lib/modules && log "removed the empty /lib/modules Docker created"
  fi
  rm -rf "$RUN"
  for c in /sys/fs/cgroup/*/docker; do [ ! -d "$c" ] || log "left: $c"; done
}

cmd_status() {
  if alive holder && alive containerd && alive dockerd && DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1; then
    echo "running: dockerd $(pid_of dockerd), containerd $(pid_of containerd), namespaces of $(pid_of holder); DOCKER_HOST=unix://$SOCK"
  else
    echo "not running"; return 1
  fi
}

cmd_env() {
  cmd_status >/dev/null || die "not running (hack/kind-docker.sh up)"
  echo "DOCKER_HOST=unix://$SOCK"
  echo "SSO_KIND_NETNS_PID=$(pid_of holder)"
}

cmd_exec() {
  cmd_status >/dev/null || die "not running (hack/kind-docker.sh up)"
  DOCKER_HOST=unix://$SOCK nsenter -t "$(pid_of holder)" -n -- "$@"
}

cd "$REPO"
case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  exec) shift; cmd_exec "$@" ;;
  *) die "usage: $0 up|down|status|env|exec CMD..." ;;
esac
