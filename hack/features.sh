#!/usr/bin/env bash
# One feature set for every build: the cargo commands of the Makefile and hack/ each resolve the
# features of the dependencies they build, and a crate resolved with other features is compiled
# again, with everything that depends on it (the operator's library among them). With resolver 2
# `cargo build --bin sidecarset-operator`, `cargo test` of the operator package (its
# dev-dependencies) and `cargo build -p sidecarset-e2e` resolve separately, so a feature that only
# a dev-dependency or the e2e crate asks for splits the build in two or three.
#
#   hack/features.sh check   fail, naming each crate and the features that differ, when any of
#                            those commands resolves a crate it shares with the workspace build
#                            (`cargo test --workspace --no-run`) with other features (the
#                            comparison is `cargo xtask features-compare`, crates/xtask)
#
# Fix a failure by asking for the missing features in crates/operator/Cargo.toml's [dependencies]
# (a direct dependency there, if need be, only to name its features).
#
# One difference is allowed, on purpose: the operator binary's tokio has no `test-util` (the
# paused clock of the shell's mock-API tests; tower-test asks for it). Naming it in the operator's
# [dependencies] would put a test clock into the binary users run, behind every Instant::now.
# The price: tokio and the crates above it are compiled once more for the binary (about 3 min
# cold on 2 cores). The e2e crate asks for test-util itself, so its build is the workspace's.
#
# Not checked: `cargo run -p xtask` (the build tool the scripts call) resolves alone, with fewer
# features of seven small crates (memchr, num-traits, regex-automata, serde_core, serde_json,
# smallvec, syn); they and the few above them are compiled once more for it, about 20 s of CPU,
# once. Naming those features in crates/xtask would only move the list there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tree() { cargo tree --offline --locked --prefix none -f '{p}|{f}' "$@" 2>/dev/null || cargo tree --prefix none -f '{p}|{f}' "$@"; }

case "${1:-check}" in
  check)
    w=$(mktemp -d)
    trap 'rm -rf "$w"' EXIT
    # name: the command whose build it mirrors; args: the cargo tree arguments that resolve as it does
    tree --workspace >"$w/workspace"
    tree -e no-dev -p sidecarset-operator >"$w/bin"          # cargo build --bin sidecarset-operator
    tree --workspace --exclude sidecarset-e2e >"$w/unit"      # make unit
    tree -p sidecarset-e2e >"$w/e2e"                          # cargo build -p sidecarset-e2e --tests
    # The comparison: crates/xtask/src/features.rs (`cargo xtask features-compare`).
    cargo run -q --locked -p xtask -- features-compare "$w"
    ;;
  *)
    echo "usage: hack/features.sh check" >&2
    exit 2
    ;;
esac
