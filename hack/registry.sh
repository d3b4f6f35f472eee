#!/usr/bin/env bash
# An OCI registry on this machine, for tests that need one (charts pushed as OCI artifacts,
# images pulled by containerd, OLM catalogs): `crane registry serve` from go-containerregistry,
# built into the tools cache by hack/tools.sh. Plain HTTP, no auth, blobs on disk under the
# state directory; nothing leaves the machine.
#
#   hack/registry.sh up     start it (idempotent); prints the env lines below
#   hack/registry.sh down   stop it by its PID and remove its storage
#   hack/registry.sh env    export SSO_REGISTRY=HOST:PORT and CRANE_BIN=DIR (for `eval`)
#   hack/registry.sh exec CMD...   CMD in the registry's network namespace (with the env above)
#
# Env:
#   SSO_WORK                 state under $SSO_WORK/registry (default <repo>/.local)
#   SSO_REGISTRY_NETNS_PID   run it inside the network namespace of this PID (the real node's
#                            namespace holder: `hack/node.sh env` prints SSO_NODE_NS_PID), so
#                            that the node's containerd can pull from it
#   SSO_REGISTRY_HOST        the address it listens on (default 127.0.0.1)
#   SSO_REGISTRY_PORT        its port (default: a free one, picked in its namespace)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${SSO_WORK:-$REPO/.local}
DIR=$WORK/registry
NS_PID=${SSO_REGISTRY_NETNS_PID:-}
HOST=${SSO_REGISTRY_HOST:-127.0.0.1}

log() { printf '[registry] %s\n' "$*" >&2; }
die() { printf '[registry] error: %s\n' "$*" >&2; exit 1; }

# inns CMD...: CMD in the registry's network namespace (or here)
inns() {
  if [ -n "$NS_PID" ]; then nsenter -t "$NS_PID" -n -- "$@"; else "$@"; fi
}

crane_bin() { eval "$("$REPO/hack/tools.sh" crane)"; echo "$CRANE_BIN"; }

alive() { [ -s "$DIR/pid" ] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null && [ -s "$DIR/address" ]; }

answers() { inns curl -fsS -o /dev/null --max-time 2 "http://$1/v2/"; }

cmd_env() {
  alive || die "the registry is not running (hack/registry.sh up)"
  printf 'export SSO_REGISTRY=%q\n' "$(cat "$DIR/address")"
  printf 'export CRANE_BIN=%q\n' "$(cat "$DIR/crane")"
}

cmd_up() {
  command -v curl >/dev/null || die "curl is needed"
  if [ -n "$NS_PID" ]; then [ -e "/proc/$NS_PID/ns/net" ] || die "no process $NS_PID to take the network namespace from"; fi
  mkdir -p "$DIR"
  exec 8>"$DIR/.lock"
  flock 8
  if alive && answers "$(cat "$DIR/address")"; then
    cmd_env
    return
  fi
  local crane port
  crane=$(crane_bin)
  port=${SSO_REGISTRY_PORT:-$(inns python3 -c 'import socket; s=socket.socket(); s.bind(("'"$HOST"'", 0)); print(s.getsockname()[1])')}
  rm -rf "$DIR/blobs" "$DIR/pid" "$DIR/address"
  mkdir -p "$DIR/blobs"
  # setsid: its own session, so that the caller's job control and terminal leave it alone;
  # fd 8 (the lock) is not inherited. The PID recorded is crane's own (the shell execs it):
  # `$!` would be the subshell running inns, and killing that leaves crane running.
  # shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell
  inns setsid /bin/sh -c 'echo $$ >"$0"; exec "$@"' "$DIR/pid" "$crane/crane" registry serve --address "$HOST:$port" --disk "$DIR/blobs" \
    </dev/null >"$DIR/registry.log" 2>&1 8>&- &
  for _ in $(seq 50); do [ -s "$DIR/pid" ] && break; sleep 0.1; done
  echo "$crane" >"$DIR/crane"
  for _ in $(seq 100); do
    if answers "$HOST:$port"; then
      echo "$HOST:$port" >"$DIR/address"
      log "serving on $HOST:$port${NS_PID:+ (network namespace of $NS_PID)}, pid $(cat "$DIR/pid"), log $DIR/registry.log"
      cmd_env
      return
    fi
    kill -0 "$(cat "$DIR/pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$DIR/registry.log" >&2 || true
  die "the registry did not answer on $HOST:$port"
}

cmd_down() {
  [ -d "$DIR" ] || return 0
  if [ -s "$DIR/pid" ]; then
    local p
    p=$(cat "$DIR/pid")
    if kill -0 "$p" 2>/dev/null; then
      # $p is the subshell that started crane (its child): the child first, or it outlives it.
      pkill -TERM -P "$p" 2>/dev/null || true
      kill "$p" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$p" 2>/dev/null || true
      log "stopped ($p)"
    fi
  fi
  rm -rf "$DIR"
}

cmd_exec() {
  [ $# -gt 0 ] || die "usage: hack/registry.sh exec CMD..."
  eval "$(cmd_env)"
  SSO_REGISTRY=$SSO_REGISTRY CRANE_BIN=$CRANE_BIN inns "$@"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  exec) shift; cmd_exec "$@" ;;
  *) echo "usage: $0 up|down|env|exec CMD..." >&2; exit 2 ;;
esac
