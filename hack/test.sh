#!/usr/bin/env bash
# `make test`: every suite, in phases, with a table of what each phase cost at the end.
#
#   hack/test.sh            all phases (what `make test` and CI run)
#   hack/test.sh check      the fast inner loop (`make check`): fmt, shellcheck, clippy, the feature check,
#                           generated-file drift, the dependency policy (cargo-deny, offline: deny.toml,
#                           hack/deps.sh), the docs site (built, links checked),
#                           unit/fixture/conformance/webhook tests, chart lint; no cluster
#
# The Go test tools (helm, operator-sdk, opm, etcd, kwok, the control plane, the kubelet) are
# built in the background from the start, while the Rust phases keep the cores busy only part of
# the time (a crate's front end and the links run on one core). A phase that needs a tool before
# it is ready waits on the tool's lock in hack/tools.sh / hack/bundle.sh, or builds it itself if
# the background build failed (its error is then in the tools log and the table says so).
#
# The table goes to stderr and to $SSO_WORK/phases.txt (default .local/phases.txt): one line per
# phase with its wall time and result; the background tools line lists each tool's build time.
#
# Env: SSO_WORK (default <repo>/.local), SSO_TEST_TOOLS_BG=0 (build tools in the foreground, when
# a phase first asks for them).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK
# No stack backtraces under the test runs (SSO_TEST_BACKTRACE=1 keeps them): a failing test's
# message (file:line and what it saw) is then the last thing it prints, which is the part of
# the output a CI summary shows; a backtrace of an async test adds some fifty frames of tokio.
export RUST_BACKTRACE=${SSO_TEST_BACKTRACE:-0}
mkdir -p "$WORK/logs"
TABLE=$WORK/phases.txt
START=$SECONDS
: >"$TABLE.tmp"

log() { printf '\n[test] ==== %s (%d s)\n' "$*" "$((SECONDS - START))" >&2; }

fmt_s() { printf '%d:%02d' "$(($1 / 60))" "$(($1 % 60))"; }

# phase NAME CMD...: run CMD, record its wall time and result; stop at the first failure.
phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  log "$name: $*"
  "$@" || rc=$?
  local dt=$((SECONDS - t0)) res=ok
  [ "$rc" = 0 ] || res="FAILED (exit $rc)"
  printf '%-22s %8s  %s\n' "$name" "$(fmt_s "$dt")" "$res" >>"$TABLE.tmp"
  if [ "$rc" != 0 ]; then
    finish "$rc"
  fi
}

BG_PID=
BG_T0=
BG_LOG=$WORK/logs/tools.log
start_tools() {
  [ "${SSO_TEST_TOOLS_BG:-1}" = 1 ] || return 0
  local want=(all)
  # The kubelet only where the real node can run (hack/e2e-node.sh skips or fails otherwise).
  if hack/node.sh check >/dev/null 2>&1; then want+=(kubelet); fi
  BG_T0=$SECONDS
  rm -f "$BG_LOG.end"
  log "tools: building in the background (log: $BG_LOG)"
  (
    trap 'echo $SECONDS >"$BG_LOG.end"' EXIT
    # In the order the phases need them: helm and helm-docs (chart lint, the chart README's drift), operator-sdk + opm (bundle), then
    # the control plane (kwok e2e), the kubelet (real node) and crane (the registry and the
    # release step of the chart test). Debian packages for the node are
    # installed meanwhile too (no CPU to speak of).
    if [ "${#want[@]}" -gt 1 ]; then hack/node.sh deps || true; fi
    # cargo-deny (the deps phase) and the release's cargo-cyclonedx, cargo-auditable and cosign
    # (the release step of the chart test) go in too.
    hack/tools.sh helm helm-docs cargo-deny >/dev/null &&
      hack/bundle.sh tools &&
      hack/tools.sh "${want[@]}" crane >/dev/null &&
      hack/docs.sh install >/dev/null &&
      hack/tools.sh supply-chain >/dev/null
  ) >"$BG_LOG" 2>&1 &
  BG_PID=$!
}

# The tools line of the table: the background job's span and each tool's own build time.
tools_line() {
  [ -n "$BG_PID" ] || return 0
  local rc=0 res
  if kill -0 "$BG_PID" 2>/dev/null; then
    res="still running (stopped)"
    kill -- "$BG_PID" 2>/dev/null || true
  else
    wait "$BG_PID" || rc=$?
    res=ok
    [ "$rc" = 0 ] || res="FAILED (exit $rc; see $BG_LOG)"
  fi
  local built
  built=$(sed -n 's/^\[[a-z]*\] \(.*\) built in \([0-9]*\) s$/\1 \2/p' "$BG_LOG" 2>/dev/null |
    awk '{t=$NF; $NF=""; sub(/ $/, ""); printf "%s%s %d:%02d", (NR>1?", ":""), $0, t/60, t%60}')
  [ -n "$built" ] || built="all cached"
  local end
  end=$(cat "$BG_LOG.end" 2>/dev/null || echo $SECONDS)
  printf '%-22s %8s  %s; built: %s\n' "tools (background)" "$(fmt_s $((end - BG_T0)))" "$res" "$built" >>"$TABLE.tmp"
}

finish() {
  local rc=$1
  tools_line
  {
    printf '%-22s %8s  %s\n' phase "m:ss" result
    cat "$TABLE.tmp"
    printf '%-22s %8s  %s\n' total "$(fmt_s $((SECONDS - START)))" "$([ "$rc" = 0 ] && echo ok || echo FAILED)"
  } >"$TABLE"
  rm -f "$TABLE.tmp"
  printf '\n[test] phases (also in %s):\n' "${TABLE#"$REPO"/}" >&2
  sed 's/^/[test]   /' "$TABLE" >&2
  exit "$rc"
}
trap 'finish 130' INT TERM

case "${1:-all}" in
  check)
    phase fmt cargo fmt --all -- --check
    phase shellcheck make -s shellcheck
    # Before anything compiles: a dependency the policy refuses fails here, not after a build.
    phase deps hack/deps.sh check
    phase features hack/features.sh check
    phase clippy cargo clippy --workspace --all-targets -- -D warnings
    phase manifests make -s check-manifests
    phase docs make -s docs-check
    phase unit make -s unit
    phase helm-lint make -s helm-lint
    finish 0
    ;;
  all)
    start_tools
    phase fmt cargo fmt --all -- --check
    phase shellcheck make -s shellcheck
    phase features hack/features.sh check
    phase clippy cargo clippy --workspace --all-targets -- -D warnings
    # One build of everything the later phases run: the binary, the unit and e2e test binaries
    # (the feature check above makes these one feature set, so nothing is compiled twice but
    # tokio and what uses it, for the binary without tokio's test clock: hack/features.sh; the
    # examples and benches are benchmarks no test runs: clippy checks that they compile).
    phase build bash -c 'cargo test --workspace --tests --no-run && cargo build --bin sidecarset-operator'
    phase manifests make -s check-manifests
    phase unit make -s unit
    phase helm-lint make -s helm-lint
    phase bundle make -s bundle-validate
    phase deps hack/deps.sh check
    phase e2e-local make -s e2e-local
    phase chart-test-local make -s chart-test-local
    phase e2e-node make -s e2e-node
    # mdBook is built last in the background (a cold build is minutes of CPU), while the e2e
    # suites run: checked after them, not waited for before them (on a new machine this phase
    # waited 5.6 min for the build with nothing else to do).
    phase docs make -s docs-check
    if [ -s "$WORK/skipped-suites" ]; then
      echo "make test: SKIPPED $(cat "$WORK/skipped-suites")"
    else
      echo "make test: every suite ran (kwok and real node)"
    fi
    finish 0
    ;;
  *)
    echo "usage: hack/test.sh [all|check]" >&2
    exit 2
    ;;
esac
