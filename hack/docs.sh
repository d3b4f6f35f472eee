#!/usr/bin/env bash
# The documentation site (docs/, an mdBook): mdBook at a pinned version, installed with
# `cargo install --locked` into the tools cache keyed by its version (as hack/tools.sh keeps the
# Go tools), and the site built and checked.
#
#   hack/docs.sh install   install mdBook when it is not cached; prints MDBOOK_BIN=DIR (for eval)
#   hack/docs.sh build     build the site into target/docs (`make docs`); open target/docs/index.html
#   hack/docs.sh check     build it into a temporary directory (mdBook fails on a SUMMARY.md entry
#                          whose file is missing), then the link check of docs/ and README.md
#                          (`cargo xtask docs-check`: relative links, their anchors, the README's
#                          size) (`make check`)
#
# A cold install builds mdBook from its crate (about 3 min on 2 busy cores); cached, nothing.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MDBOOK_VERSION=${MDBOOK_VERSION:-0.5.4}
CACHE=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/bin}

log() { printf '[docs] %s\n' "$*" >&2; }

mdbook_ok() { [ -x "$1/mdbook" ] && "$1/mdbook" --version 2>/dev/null | grep -qF "v$MDBOOK_VERSION"; }

install() {
  local out=$CACHE/mdbook-v$MDBOOK_VERSION
  if ! mdbook_ok "$out/bin"; then
    mkdir -p "$out"
    exec 9>"$out/.lock"
    flock 9
    if ! mdbook_ok "$out/bin"; then
      local start=$SECONDS
      log "installing mdBook $MDBOOK_VERSION into $out (cargo install --locked)"
      # Only the search feature: the site is built, not served or watched.
      cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" --no-default-features \
        --features search --root "$out" >&2
      mdbook_ok "$out/bin" || { log "error: $out/bin/mdbook does not report v$MDBOOK_VERSION"; exit 1; }
      log "mdbook $MDBOOK_VERSION built in $((SECONDS - start)) s"
    fi
    exec 9>&-
  fi
  echo "MDBOOK_BIN=$out/bin"
}

build() { # OUT
  local env rc=0 out
  env=$(install)
  eval "$env"
  out=$("$MDBOOK_BIN/mdbook" build "$REPO/docs" --dest-dir "$1" 2>&1) || rc=$?
  grep -v ' INFO ' <<<"$out" >&2 || true
  [ "$rc" = 0 ] || { log "error: mdbook build failed (exit $rc)"; exit 1; }
}

case ${1:-build} in
  install) install ;;
  build)
    rm -rf "$REPO/target/docs"
    build "$REPO/target/docs"
    log "built $REPO/target/docs (open index.html)" ;;
  check)
    w=$(mktemp -d)
    trap 'rm -rf "$w"' EXIT
    build "$w/site"
    (cd "$REPO" && cargo run -q --locked -p xtask -- docs-check --site "$w/site")
    log "the site builds and its links resolve" ;;
  *) echo "usage: $0 [install|build|check]" >&2; exit 2 ;;
esac
