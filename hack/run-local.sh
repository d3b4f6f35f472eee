#!/usr/bin/env bash
# Runs the operator as a local process against the current KUBECONFIG. The API server calls the
# webhooks by URL (https://127.0.0.1:<port>/...); the operator manages its own certificates.
#
#   hack/run-local.sh [--background]     (foreground by default; --background writes a pid file)
#
# Env: SSO_WORK (default .local), SSO_PORT (default 9443), SSO_FAILURE_POLICY (Fail|Ignore),
#      SSO_BIN (operator binary; default target/debug/sidecarset-operator, built if missing),
#      SSO_OPERATOR_KUBECONFIG (the operator's identity, e.g. the Helm chart's ServiceAccount
#      from `hack/chart-test.sh sa-kubeconfig`; default KUBECONFIG), SSO_MANAGE_WEBHOOKS
#      (true: the operator creates its webhook configurations; false: a Helm release installed
#      with webhook.url owns them and the operator only writes caBundle).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${SSO_WORK:-$REPO/.local}
PORT=${SSO_PORT:-9443}
BIN=${SSO_BIN:-$REPO/target/debug/sidecarset-operator}
PIDFILE=$WORK/operator.pid
LOG=$WORK/operator.log
KUBECTL=${KUBECTL:-$(command -v "$WORK/bin/kubectl" || command -v kubectl || true)}

log() { printf '[run-local] %s\n' "$*" >&2; }
die() { printf '[run-local] error: %s\n' "$*" >&2; exit 1; }

[ -n "${KUBECONFIG:-}" ] || [ -f "$HOME/.kube/config" ] || die "no KUBECONFIG: start a cluster (make cluster-up) or set KUBECONFIG"
[ -n "$KUBECTL" ] || die "kubectl is not on PATH"

# A previous background run is stopped first.
if [ -f "$PIDFILE" ]; then
  kill "$(cat "$PIDFILE")" 2>/dev/null || true
  rm -f "$PIDFILE"
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  die "port $PORT is taken: stop what listens there or set SSO_PORT"
fi

if [ ! -x "$BIN" ]; then
  log "building the operator"
  (cd "$REPO" && cargo build --bin sidecarset-operator)
fi

log "installing the SidecarSet CRD"
if ! out=$("$BIN" crd | "$KUBECTL" apply --server-side --force-conflicts --field-manager=sidecarset-operator -f - 2>&1 >/dev/null); then
  # A CRD an earlier run left has its conversion webhook pointing at that run's URL, which the
  # generated CRD (Service mode) cannot be merged with; the operator keeps those settings.
  "$KUBECTL" get crd sidecarsets.apps.kruise.io >/dev/null 2>&1 || die "cannot install the CRD: $out"
  log "the SidecarSet CRD is installed already (kept as it is: $out)"
fi
for i in $(seq 1 60); do
  [ "$("$KUBECTL" get crd sidecarsets.apps.kruise.io -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && break
  [ "$i" = 60 ] && die "the SidecarSet CRD was not established within 30 s"
  sleep 0.5
done
"$KUBECTL" get namespace sidecarset-system >/dev/null 2>&1 || "$KUBECTL" create namespace sidecarset-system >/dev/null

# Self-managed certificates: the operator makes its CA and a serving certificate for 127.0.0.1,
# keeps them in the Secret sidecarset-system/sidecarset-operator-webhook-certs and writes the
# caBundle. Other settings come from the environment (SSO_CERT_VALIDITY, SSO_CA_OVERLAP, ...).
args=(run --listen "127.0.0.1:$PORT" --namespace sidecarset-system
  --metrics-listen "127.0.0.1:${SSO_METRICS_PORT:-9090}"
  --webhook-url "https://127.0.0.1:$PORT" --failure-policy "${SSO_FAILURE_POLICY:-Fail}")
if [ "${SSO_MANAGE_WEBHOOKS:-true}" = true ]; then
  args+=(--manage-webhooks)
fi
OPERATOR_KUBECONFIG=${SSO_OPERATOR_KUBECONFIG:-${KUBECONFIG:-$HOME/.kube/config}}
# A local process has no Service endpoint whose removal must reach the API server: stop at once
# on SIGTERM (the in-cluster default keeps serving 5 s, crates/operator/src/shutdown.rs).
export SSO_SHUTDOWN_DELAY=${SSO_SHUTDOWN_DELAY:-0}

if [ "${1:-}" != "--background" ]; then
  log "starting the operator on 127.0.0.1:$PORT (Ctrl-C stops it)"
  KUBECONFIG=$OPERATOR_KUBECONFIG exec "$BIN" "${args[@]}"
fi

log "starting the operator in the background on 127.0.0.1:$PORT (log: $LOG)"
KUBECONFIG=$OPERATOR_KUBECONFIG nohup "$BIN" "${args[@]}" >"$LOG" 2>&1 &
echo $! >"$PIDFILE"
for _ in $(seq 1 60); do
  if curl -skf --max-time 2 "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
    log "operator ready (pid $(cat "$PIDFILE"))"
    exit 0
  fi
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -n 30 "$LOG" >&2; die "the operator exited"; }
  sleep 0.5
done
tail -n 30 "$LOG" >&2
die "the operator was not ready within 30 s"
