#!/usr/bin/env bash
# Packages the operator binary as the kubectl plugin `kubectl sidecarset` for Krew: an archive
# holding the binary named kubectl-sidecarset and the LICENSE, and plugins/sidecarset.yaml with its sha256.
#
#   hack/krew.sh [OUT]     OUT defaults to .local/krew
#
# Environment:
#   BIN            the binary to package (default target/release/sidecarset-operator, built
#                  when missing)
#   KREW_BASE_URL  where the archive will be published (the manifest's uri); default: the
#                  placeholder of plugins/sidecarset.yaml (fine for a local install with --archive;
#                  `make release` sets it)
#   SOURCE_DATE_EPOCH  the files' time in the archive (the archive is otherwise the same for the
#                  same binary: fixed owner, order, gzip header)
# Then: kubectl krew install --manifest=OUT/sidecarset.yaml --archive=OUT/<archive>
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=${1:-.local/krew}
BIN=${BIN:-target/release/sidecarset-operator}
VERSION=v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
case $(uname -m) in x86_64) ARCH=amd64 ;; aarch64 | arm64) ARCH=arm64 ;; *) ARCH=$(uname -m) ;; esac
OS=$(uname -s | tr '[:upper:]' '[:lower:]')
[ -x "$BIN" ] || cargo build --release --bin sidecarset-operator
mkdir -p "$OUT/stage"
cp "$BIN" "$OUT/stage/kubectl-sidecarset"
cp LICENSE "$OUT/stage/LICENSE"
ARCHIVE=kubectl-sidecarset_${VERSION}_${OS}_${ARCH}.tar.gz
# The same files give the same archive (and sha256): owner, order and gzip header fixed, the
# files' time SOURCE_DATE_EPOCH when set (hack/release.sh sets the commit's time).
stamp=()
[ -z "${SOURCE_DATE_EPOCH:-}" ] || stamp=(--mtime="@$SOURCE_DATE_EPOCH")
chmod 0755 "$OUT/stage/kubectl-sidecarset"
chmod 0644 "$OUT/stage/LICENSE"
tar -C "$OUT/stage" --sort=name --owner=0 --group=0 --numeric-owner "${stamp[@]}" -cf - kubectl-sidecarset LICENSE \
  | gzip -n -6 >"$OUT/$ARCHIVE"
rm -rf "$OUT/stage"
SHA=$(sha256sum "$OUT/$ARCHIVE" | cut -d' ' -f1)
BASE=${KREW_BASE_URL:-https://releases.example.invalid/sidecarset-operator/$VERSION}
# The manifest: the template with the version and this archive's platform, uri and sha256
# (crates/xtask/src/krew.rs).
cargo run -q --locked -p xtask -- krew-manifest --template plugins/sidecarset.yaml --out "$OUT/sidecarset.yaml" \
  --os "$OS" --arch "$ARCH" --uri "$BASE/$ARCHIVE" --sha256 "$SHA" --version "$VERSION"
echo "wrote $OUT/$ARCHIVE and $OUT/sidecarset.yaml (sha256 $SHA)" >&2
echo "install: kubectl krew install --manifest=$OUT/sidecarset.yaml --archive=$OUT/$ARCHIVE" >&2
