#!/bin/sh
# RUSTC_WRAPPER of the release build (hack/release.sh): rustc with the machine's paths in what it
# writes (panic locations, debug info) replaced by fixed ones, so that the same commit gives the
# same binary wherever it is checked out and built. Environment variables, not RUSTFLAGS: Cargo
# would rebuild every dependency for another RUSTFLAGS, and the builds of two checkouts that share
# a target directory then share the dependencies (only the workspace's crates differ in path).
#   SSO_REMAP_SRC     the checkout            -> /build/sidecarset-operator
#   SSO_REMAP_TARGET  the Cargo target dir    -> /build/target (after the checkout: it wins when
#                                                inside it)
#   CARGO_HOME        the registry sources    -> /cargo
rustc=$1
shift
exec "$rustc" "$@" \
  --remap-path-prefix="${CARGO_HOME:-$HOME/.cargo}=/cargo" \
  ${SSO_REMAP_SRC:+--remap-path-prefix="$SSO_REMAP_SRC=/build/sidecarset-operator"} \
  ${SSO_REMAP_TARGET:+--remap-path-prefix="$SSO_REMAP_TARGET=/build/target"}
