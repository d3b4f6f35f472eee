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
#                            (`cargo test --workspace --no-run`) with other features
#
# Fix a failure by asking for the missing features in crates/operator/Cargo.toml's [dependencies]
# (a direct dependency there, if need be, only to name its features).
#
# One difference is allowed, on purpose: the operator binary's tokio has no `test-util` (the
# paused clock of the shell's mock-API tests; tower-test asks for it). Naming it in the operator's
# [dependencies] would put a test clock into the binary users run, behind every Instant::now.
# The price: tokio and the crates above it are compiled once more for the binary (about 3 min
# cold on 2 cores). The e2e crate asks for test-util itself, so its build is the workspace's.
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
    python3 - "$w" <<'EOF'
import collections, os, sys
w = sys.argv[1]
def load(name):
    feats = collections.defaultdict(set)
    for line in open(os.path.join(w, name)):
        line = line.strip()
        if not line or "|" not in line:
            continue
        pkg, f = line.rsplit("|", 1)
        pkg = pkg.replace(" (*)", "").strip()
        if "(/" in pkg:
            continue  # workspace members are always compiled per command
        f = f.replace("(*)", "").strip()
        feats[pkg].add(f)
    return feats
ws = load("workspace")
cmds = {
    "bin": "cargo build --bin sidecarset-operator",
    "unit": "make unit (cargo test --workspace --exclude sidecarset-e2e)",
    "e2e": "cargo build -p sidecarset-e2e --tests",
}
bad = 0
for name, cmd in cmds.items():
    other = load(name)
    for pkg, fs in sorted(other.items()):
        if name == "bin" and pkg.startswith("tokio v"):
            # allowed: the workspace build's tokio is the binary's plus test-util
            strip = lambda f: ",".join(x for x in f.split(",") if x != "test-util")
            if {strip(f) for f in ws[pkg]} == {strip(f) for f in fs} and all("test-util" not in f for f in fs):
                continue
        if pkg in ws and not fs <= ws[pkg]:
            bad += 1
            print(f"[features] {pkg}: `{cmd}` resolves {sorted(fs)}, the workspace build {sorted(ws[pkg])}")
if bad:
    print(f"[features] {bad} crate(s) would be compiled twice; name the workspace build's features in crates/operator/Cargo.toml's [dependencies]", file=sys.stderr)
    sys.exit(1)
n = len(ws)
print(f"[features] one feature set: {n} crates resolve alike in the binary, unit and e2e builds (the binary's tokio without test-util)")
EOF
    ;;
  *)
    echo "usage: hack/features.sh check" >&2
    exit 2
    ;;
esac
