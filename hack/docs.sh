#!/usr/bin/env bash
# The documentation site (docs/, an mdBook): mdBook and mdbook-mermaid (its diagrams) at pinned
# versions, installed with `cargo install --locked` into the tools cache keyed by their versions
# (as hack/tools.sh keeps the Go tools), and the site built and checked.
#
#   hack/docs.sh install   install them when they are not cached; prints MDBOOK_BIN=DIR and
#                          MERMAID_BIN=DIR (for eval)
#   hack/docs.sh build     build the site into target/docs (`make docs`); open target/docs/index.html
#   hack/docs.sh check     build it into a temporary directory (mdBook fails on a SUMMARY.md entry
#                          whose file is missing) after `hack/pictures.py check` (the pictures
#                          are what it draws), then `cargo xtask docs-check` on the built
#                          HTML and README.md: relative links and their anchors, the README's
#                          size and install block, the chart README's links (`make check`)
#
# A cold install builds both from their crates (about 3 and 2 min on 2 busy cores); cached,
# nothing. mdbook-mermaid's JavaScript (mermaid.min.js, mermaid-init.js) is written into docs/ at
# each build, from the installed version (git-ignored there).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MDBOOK_VERSION=${MDBOOK_VERSION:-0.5.4}
MERMAID_VERSION=${MERMAID_VERSION:-0.17.1}
CACHE=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/bin}

log() { printf '[docs] %s\n' "$*" >&2; }

# tool_ok DIR BINARY VERSION: DIR/BINARY exists and reports VERSION
tool_ok() { [ -x "$1/$2" ] && "$1/$2" --version 2>/dev/null | grep -qF "$3"; }

# cargo_tool CRATE VERSION BINARY [cargo install flags...]: prints the bin directory
cargo_tool() {
  local crate=$1 version=$2 binary=$3 out=$CACHE/$1-v$2
  shift 3
  if ! tool_ok "$out/bin" "$binary" "$version"; then
    mkdir -p "$out"
    exec 9>"$out/.lock"
    flock 9
    if ! tool_ok "$out/bin" "$binary" "$version"; then
      local start=$SECONDS
      log "installing $crate $version into $out (cargo install --locked)"
      cargo install --quiet --locked "$crate" --version "$version" --root "$out" "$@" >&2
      tool_ok "$out/bin" "$binary" "$version" || { log "error: $out/bin/$binary does not report $version"; exit 1; }
      log "$crate $version built in $((SECONDS - start)) s"
    fi
    exec 9>&-
  fi
  echo "$out/bin"
}

install() {
  local mdbook mermaid
  # Only mdBook's search feature: the site is built, not served or watched.
  mdbook=$(cargo_tool mdbook "$MDBOOK_VERSION" mdbook --no-default-features --features search)
  mermaid=$(cargo_tool mdbook-mermaid "$MERMAID_VERSION" mdbook-mermaid)
  echo "MDBOOK_BIN=$mdbook"
  echo "MERMAID_BIN=$mermaid"
}

build() { # OUT
  local env rc=0 out
  env=$(install)
  eval "$env"
  # The diagrams' JavaScript of the installed mdbook-mermaid (book.toml names both files).
  rm -f "$REPO/docs/mermaid.min.js" "$REPO/docs/mermaid-init.js"
  "$MERMAID_BIN/mdbook-mermaid" install "$REPO/docs" >/dev/null 2>&1 || { log "error: mdbook-mermaid install failed"; exit 1; }
  out=$(PATH="$MERMAID_BIN:$PATH" "$MDBOOK_BIN/mdbook" build "$REPO/docs" --dest-dir "$1" 2>&1) || rc=$?
  grep -v -e ' INFO ' -e 'preprocessor was built against version' <<<"$out" >&2 || true
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
    # The pictures are what hack/pictures.py draws (from its steps, the recorded rollout and dashboard).
    python3 "$REPO/hack/pictures.py" check
    build "$w/site"
    (cd "$REPO" && cargo run -q --locked -p xtask -- docs-check --site "$w/site")
    log "the site builds and its links resolve" ;;
  *) echo "usage: $0 [install|build|check]" >&2; exit 2 ;;
esac
