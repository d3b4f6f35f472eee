#!/usr/bin/env bash
# The release artifacts (`make release`), made on this machine, into a git-ignored directory:
#
#   sidecarset-operator-VERSION.tgz                 the chart archive (helm package), pushed as
#                                                   an OCI artifact (helm push) to CHART_REPO
#   sidecarset-operator_vVERSION_OS_ARCH.oci.tar    the operator image as an OCI image layout in
#                                                   a tar (hack/images.sh operator, from the
#                                                   release binary, without Docker); its manifest
#                                                   digest in ….oci.tar.digest; pushed to
#                                                   IMAGE_REPO when that is set
#   kubectl-sidecarset_vVERSION_OS_ARCH.tar.gz      the Krew archive (binary + LICENSE,
#                                                   hack/krew.sh)
#   sidecarset.yaml                                 the Krew manifest with that archive's sha256
#   RELEASE-NOTES.md                                the CHANGELOG.md entry of VERSION
#   release.json                                    version, commit, every file's sha256, the
#                                                   chart's OCI reference and digest, the image's
#   sidecarset-operator-VERSION.tgz.prov            the chart's Helm provenance file (PGP
#                                                   clear signature of its Chart.yaml and sha256)
#   sidecarset-operator_vVERSION.cdx.json           CycloneDX SBOM of the binary (Cargo graph)
#   sidecarset-operator_vVERSION.image.cdx.json     CycloneDX SBOM of the image
#   provenance.json                                 the SLSA v1 provenance predicate of the image
#   sidecarset-operator_vVERSION.intoto.jsonl       the image's signed attestations (SBOM and
#                                                   provenance, DSSE envelopes by cosign)
#   cosign.pub, sidecarset-operator-release.asc     the public keys of the signatures
#   SHA256SUMS                                      sha256sum of every file above
#
# The image and the OCI chart are signed by digest with cosign in the registry they were pushed
# to, the image SBOM and provenance attached as attestations (hack/supply-chain.sh); the chart
# carries the PGP key's fingerprint and SIGN_KEY_URL in its artifacthub.io/signKey annotation.
# The binary is `cargo auditable build --release --locked` (its dependency list embedded in the
# section .dep-v0) with the build's paths remapped (hack/rustc-remap.sh): the same commit gives
# the same binary and image digest wherever it is built (`hack/release.sh reproduce` checks).
#
#   hack/release.sh              make the release (what `make release` runs)
#   hack/release.sh reproduce OUT  build the release binary of HEAD twice, in two checkouts in
#                                different directories (sharing one target directory's
#                                dependencies), and its image from each: the binaries and the
#                                image digests must be equal; OUT gets the binary
#   hack/release.sh verify DIR   check a release directory: SHA256SUMS, the Krew manifest's
#                                sha256 against its archive, the image archive's digest (pushed
#                                with crane to a registry: REGISTRY, else the one of
#                                hack/registry.sh, started for it), the chart's digest in the
#                                registry it was pushed to; the signatures, attestations and
#                                Helm provenance with the public keys COSIGN_PUB and
#                                HELM_KEYRING (hack/supply-chain.sh verify); the binary's
#                                embedded dependency list against Cargo.lock
#
# VERSION is the chart's (charts/sidecarset-operator/Chart.yaml): version and appVersion must be
# equal, and equal to Cargo.toml's version; CHANGELOG.md's newest entry must be `## [VERSION]`.
# The release refuses a working tree with changes (tracked or untracked) unless ALLOW_DIRTY=1.
#
# Env:
#   RELEASE_DIR     the output directory (default dist; emptied first)
#   BIN             the operator binary (default: cargo auditable build --release --locked,
#                   paths remapped, then target/release/sidecarset-operator)
#   COSIGN_KEY, COSIGN_PASSWORD   the cosign private key file and its password (required)
#   HELM_SIGN_KEY   the PGP key (a name or fingerprint in gpg's keyring, GNUPGHOME) that signs
#                   the chart's provenance file (required)
#   SIGN_KEY_URL    where users fetch that PGP public key (the chart's artifacthub.io/signKey
#                   url; default KREW_BASE_URL/sidecarset-operator-release.asc)
#   CHART_REPO      where the chart is pushed: oci://HOST[:PORT]/PATH (the chart lands at
#                   CHART_REPO/sidecarset-operator:VERSION). Default: the registry on this machine
#                   (hack/registry.sh up), oci://HOST:PORT/charts, plain HTTP
#   IMAGE_REPO      where the image is pushed (HOST[:PORT]/PATH/NAME, crane push), optional; with
#                   the default CHART_REPO it defaults to HOST:PORT/sidecarset-operator there
#   PLAIN_HTTP=1    the registries speak plain HTTP (set for the registry on this machine)
#   KREW_BASE_URL   the URL the Krew archive is published under (the manifest's uri). Default:
#                   file://<RELEASE_DIR> (where it is; `kubectl krew install --manifest=…
#                   --archive=…` installs from the file either way)
#   ALLOW_DIRTY=1   release from a working tree with changes (the release records "dirty")
#   SOURCE_DATE_EPOCH  the time stamped in the archives and the image (default: the commit's
#                   time), so that the same binary gives the same digests
#   SSO_WORK        state of the registry on this machine (default <repo>/.local)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CHART=charts/sidecarset-operator

log() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] error: %s\n' "$*" >&2; exit 1; }

platform() {
  case $(uname -m) in x86_64) ARCH=amd64 ;; aarch64 | arm64) ARCH=arm64 ;; *) ARCH=$(uname -m) ;; esac
  OS=$(uname -s | tr '[:upper:]' '[:lower:]')
}

# xtask ARGS: the build tool (crates/xtask; what this script computes is there, unit-tested).
xtask() { cargo run -q --locked -p xtask -- "$@"; }

# The version, from the chart; Chart.yaml's version and appVersion and Cargo.toml agree.
release_version() {
  VERSION=$(xtask release-version) || die "no release version (see above)"
}

# The CHANGELOG.md entry of VERSION (the newest entry with a version), headed for the notes.
changelog_entry() { xtask changelog-entry "$VERSION"; }

cmd_release() {
  command -v git >/dev/null || die "git is needed"
  command -v python3 >/dev/null || die "python3 is needed"
  local dirty=false
  if [ -n "$(git status --porcelain --untracked-files=normal)" ]; then
    if [ "${ALLOW_DIRTY:-0}" = 1 ]; then
      log "the working tree has changes; going on (ALLOW_DIRTY=1), the release records \"dirty\""
      dirty=true
    else
      git status --short >&2
      die "the working tree has changes (above): commit or stash them, or set ALLOW_DIRTY=1 (make release ALLOW_DIRTY=1)"
    fi
  fi
  release_version
  platform
  local notes commit epoch
  notes=$(changelog_entry) || die "no release notes (see above)"
  commit=$(git rev-parse HEAD)
  epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
  export SOURCE_DATE_EPOCH=$epoch
  local out=${RELEASE_DIR:-dist}
  case $out in /*) ;; *) out=$REPO/$out ;; esac
  { [ "$out" != "$REPO" ] && [ "$out" != / ]; } || die "RELEASE_DIR must not be the repository or /"
  log "release $VERSION (commit ${commit:0:12}$([ "$dirty" = true ] && echo ", dirty"), $OS/$ARCH) into ${out#"$REPO"/}"
  # The keys, before anything is built: a release is signed.
  [ -s "${COSIGN_KEY:-}" ] || die "COSIGN_KEY: the cosign private key file (and COSIGN_PASSWORD) is needed: a release is signed (docs/src/releasing.md)"
  [ -n "${HELM_SIGN_KEY:-}" ] || die "HELM_SIGN_KEY: the PGP key (in gpg's keyring) that signs the chart's provenance file is needed (docs/src/releasing.md)"
  local fingerprint
  fingerprint=$(gpg --batch --with-colons --fingerprint "$HELM_SIGN_KEY" 2>/dev/null | awk -F: '$1 == "fpr" {print $10; exit}')
  [ -n "$fingerprint" ] || die "HELM_SIGN_KEY=$HELM_SIGN_KEY: no such key in gpg's keyring${GNUPGHOME:+ ($GNUPGHOME)}"

  # The registry.
  local chart_repo=${CHART_REPO:-} image_repo=${IMAGE_REPO:-} plain=${PLAIN_HTTP:-0}
  if [ -z "$chart_repo" ]; then
    eval "$(hack/registry.sh up)"
    chart_repo=oci://$SSO_REGISTRY/charts
    image_repo=${image_repo:-$SSO_REGISTRY/sidecarset-operator}
    plain=1
    log "no CHART_REPO: pushing to the registry on this machine, $chart_repo (plain HTTP)"
  fi
  case $chart_repo in oci://*) ;; *) die "CHART_REPO=$chart_repo: expected oci://HOST[:PORT]/PATH" ;; esac
  eval "$(hack/tools.sh helm)"
  local helm=$HELM_BIN/helm crane=
  if [ -n "$image_repo" ]; then eval "$(hack/tools.sh crane)"; crane=$CRANE_BIN/crane; fi
  local plain_flag=() crane_flag=()
  if [ "$plain" = 1 ]; then plain_flag=(--plain-http); crane_flag=(--insecure); fi

  # The binary.
  local bin=${BIN:-}
  if [ -z "$bin" ]; then
    bin=$(build_binary "$REPO" "${CARGO_TARGET_DIR:-$REPO/target}")
  fi
  [ -x "$bin" ] || die "BIN=$bin is not an executable"
  local binver
  binver=$("$bin" --version 2>&1 | awk '{print $NF}')
  [ "$binver" = "$VERSION" ] || die "$bin --version says '$binver', the release is $VERSION"

  rm -rf "$out"
  mkdir -p "$out"
  RELEASE_TMP=$(mktemp -d)
  trap 'rm -rf "$RELEASE_TMP"' EXIT
  local w=$RELEASE_TMP

  # 1. The chart archive, pushed as an OCI artifact.
  local t=$SECONDS chart_tgz chart_digest push_out
  "$helm" package "$CHART" -d "$out" >/dev/null
  chart_tgz=sidecarset-operator-$VERSION.tgz
  [ -s "$out/$chart_tgz" ] || die "helm package wrote no $chart_tgz"
  tar -xzOf "$out/$chart_tgz" sidecarset-operator/LICENSE | cmp -s - LICENSE || die "the chart archive lacks the repository's LICENSE"
  # helm package stamps every file with the time of packaging: the same files again, in name
  # order, with SOURCE_DATE_EPOCH and no gzip time stamp, so the same chart gives the same archive.
  mkdir -p "$w/chart"
  tar -xzf "$out/$chart_tgz" -C "$w/chart"
  # Where Artifact Hub users find the key of the provenance file.
  local key_url=${SIGN_KEY_URL:-${KREW_BASE_URL:-file://$out}/sidecarset-operator-release.asc}
  python3 - "$w/chart/sidecarset-operator/Chart.yaml" "$fingerprint" "$key_url" <<'PY'
import sys
import re
path, fpr, url = sys.argv[1:]
text = open(path).read()
if "artifacthub.io/signKey" in text:
    sys.exit("Chart.yaml already has an artifacthub.io/signKey annotation: the release writes it")
# (helm package rewrote Chart.yaml with its keys sorted: annotations may be the first line.)
text, n = re.subn(r"(?m)^annotations:\n", f"annotations:\n  artifacthub.io/signKey: |\n    fingerprint: {fpr}\n    url: {url}\n", text, count=1)
if n != 1:
    sys.exit("Chart.yaml has no annotations block")
open(path, "w").write(text)
PY
  tar -C "$w/chart" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -cf - sidecarset-operator \
    | gzip -n -9 >"$out/$chart_tgz"
  "$helm" show chart "$out/$chart_tgz" >/dev/null || die "the repacked chart archive does not load"
  helm_provenance "$helm" "$out/$chart_tgz"
  gpg --batch --armor --export "$HELM_SIGN_KEY" >"$out/sidecarset-operator-release.asc"
  eval "$(hack/tools.sh cosign)"
  "$COSIGN_BIN/cosign" public-key --key "$COSIGN_KEY" >"$out/cosign.pub" 2>/dev/null || die "cosign public-key --key $COSIGN_KEY failed (COSIGN_PASSWORD?)"
  push_out=$("$helm" push "$out/$chart_tgz" "$chart_repo" "${plain_flag[@]}" 2>&1) \
    || { printf '%s\n' "$push_out" >&2; die "helm push $chart_tgz $chart_repo failed"; }
  chart_digest=$(sed -n 's/^Digest: *\(sha256:[0-9a-f]\{64\}\)$/\1/p' <<<"$push_out")
  [ -n "$chart_digest" ] || { printf '%s\n' "$push_out" >&2; die "helm push printed no digest"; }
  log "chart $chart_tgz ($(du -h "$out/$chart_tgz" | cut -f1)) pushed: $chart_repo/sidecarset-operator:$VERSION @ $chart_digest ($((SECONDS - t)) s)"

  # 2. The operator image, as an OCI archive (hack/images.sh: the Dockerfile's runtime layout).
  t=$SECONDS
  local image_tar=sidecarset-operator_v${VERSION}_${OS}_${ARCH}.oci.tar image_digest
  SSO_IMAGE_VERSION=$VERSION SSO_IMAGE_OCI_ARCHIVE=$out/$image_tar SSO_IMAGE_OCI_TAG=$VERSION \
    hack/images.sh operator "$bin" "$w/images" 2>&1 | sed 's/^/  /' >&2
  hack/images.sh check "$w/images" 2>&1 | sed 's/^/  /' >&2
  image_digest=$(cat "$out/$image_tar.digest")
  log "image $image_tar ($(du -h "$out/$image_tar" | cut -f1)), manifest digest $image_digest ($((SECONDS - t)) s)"
  local image_ref=
  if [ -n "$image_repo" ]; then
    image_ref=$(push_layout "$crane" "$out/$image_tar" "$image_repo:$VERSION" "${crane_flag[@]}")
    [ "${image_ref#*@}" = "$image_digest" ] || die "the registry has $image_ref, the archive's digest is $image_digest"
    log "image pushed: $image_ref"
  fi

  # 3. The Krew archive and manifest.
  t=$SECONDS
  BIN=$bin KREW_BASE_URL=${KREW_BASE_URL:-file://$out} hack/krew.sh "$w/krew" 2>"$w/krew.log" \
    || { cat "$w/krew.log" >&2; die "hack/krew.sh failed"; }
  local krew_tgz=kubectl-sidecarset_v${VERSION}_${OS}_${ARCH}.tar.gz
  mv "$w/krew/$krew_tgz" "$w/krew/sidecarset.yaml" "$out/"
  log "krew $krew_tgz ($(du -h "$out/$krew_tgz" | cut -f1)) and sidecarset.yaml ($((SECONDS - t)) s)"

  # 4. The SBOMs (binary and image) and the provenance predicate.
  t=$SECONDS
  hack/supply-chain.sh sbom "$bin" "$out/$image_tar" "$out" "$VERSION"
  hack/supply-chain.sh provenance "$out/provenance.json" "$VERSION" "$commit" "$dirty"
  log "sbom and provenance ($((SECONDS - t)) s)"

  # 5. Release notes, the record, the signatures and attestations, the checksums.
  printf '%s\n' "$notes" >"$out/RELEASE-NOTES.md"
  local dirty_flag=()
  [ "$dirty" = false ] || dirty_flag=(--dirty)
  xtask release-record --dir "$out" --version "$VERSION" --commit "$commit" "${dirty_flag[@]}" --epoch "$epoch" \
    --chart "$chart_tgz" --chart-repo "$chart_repo" --chart-digest "$chart_digest" \
    --image "$image_tar" --image-digest "$image_digest" --image-ref "$image_ref" --krew "$krew_tgz"
  [ -n "$image_ref" ] || die "the image must be pushed to be signed: set IMAGE_REPO"
  t=$SECONDS
  REGISTRY_INSECURE=$plain hack/supply-chain.sh sign "$out"
  log "signatures and attestations ($((SECONDS - t)) s)"
  (cd "$out" && sha256sum -- * >"$w/SHA256SUMS") && mv "$w/SHA256SUMS" "$out/SHA256SUMS"
  cmd_verify "$out"
  log "release $VERSION in ${out#"$REPO"/}:"
  find "$out" -mindepth 1 -maxdepth 1 -printf '[release]   %10s  %f\n' | sort -k2 >&2
  log "install: helm install sidecarset-operator $chart_repo/sidecarset-operator --version $VERSION ${plain_flag[*]}"
  log "     or: helm install sidecarset-operator $chart_repo/sidecarset-operator@$chart_digest ${plain_flag[*]}"
}

# build_binary SRC TARGET: the release binary of the checkout SRC, built into the Cargo target
# directory TARGET (`cargo auditable build --release --locked`, the paths remapped by
# hack/rustc-remap.sh, SOURCE_DATE_EPOCH set); prints its path.
build_binary() {
  local src=$1 target=$2
  eval "$(hack/tools.sh cargo-auditable)"
  log "cargo auditable build --release --locked --bin sidecarset-operator (in ${src}, target ${target})"
  ( cd "$src" && PATH=$CARGO_AUDITABLE_BIN:$PATH CARGO_TARGET_DIR=$target RUSTC_WRAPPER=$REPO/hack/rustc-remap.sh \
      SSO_REMAP_SRC=$src SSO_REMAP_TARGET=$target SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:?} \
      cargo auditable build --release --locked --bin sidecarset-operator ) >&2 || die "the release build failed"
  echo "$target/release/sidecarset-operator"
}

# helm_provenance HELM TGZ: TGZ.prov, the Helm provenance file of the archive as `helm package
# --sign` writes it (the chart's metadata as helm prints it, `...`, the archive's sha256, in a
# PGP clear signature by HELM_SIGN_KEY with SHA-512), made here because the archive is repacked
# after helm packaged it; `helm verify` checks it.
helm_provenance() {
  local helm=$1 tgz=$2 msg
  msg=$(mktemp)
  { "$helm" show chart "$tgz" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
    printf '\n...\nfiles:\n  %s: sha256:%s\n' "$(basename "$tgz")" "$(sha256sum "$tgz" | cut -d' ' -f1)"; } >"$msg"
  gpg --batch --yes --quiet --local-user "$HELM_SIGN_KEY" --digest-algo SHA512 --clearsign -o "$tgz.prov" "$msg" \
    || { rm -f "$msg"; die "gpg --clearsign with HELM_SIGN_KEY=$HELM_SIGN_KEY failed"; }
  rm -f "$msg"
  "$helm" verify --keyring <(gpg --batch --export "$HELM_SIGN_KEY") "$tgz" >/dev/null 2>&1 \
    || die "helm verify does not accept the provenance file just written ($tgz.prov)"
}

# push_layout CRANE ARCHIVE REF [FLAGS]: push the OCI layout in ARCHIVE (a tar) to REF; prints
# REF@DIGEST as the registry has it.
push_layout() {
  local crane=$1 tarball=$2 ref=$3 d
  shift 3
  d=$(mktemp -d)
  tar -xf "$tarball" -C "$d"
  "$crane" push "$@" "$d" "$ref" --image-refs "$d/refs" >/dev/null 2>"$d/err" || { cat "$d/err" >&2; rm -rf "$d"; die "crane push $ref failed"; }
  "$crane" validate "$@" --remote "$ref" >/dev/null 2>"$d/err" || { cat "$d/err" >&2; rm -rf "$d"; die "crane validate --remote $ref failed"; }
  echo "${ref%:*}@$("$crane" digest "$@" "$ref")"
  rm -rf "$d"
}

cmd_verify() {
  local dir=${1:?usage: hack/release.sh verify DIR} rc=0
  [ -s "$dir/release.json" ] || die "$dir/release.json is missing (not a release directory?)"
  # Checksums.
  if (cd "$dir" && sha256sum --quiet -c SHA256SUMS) >&2; then
    log "ok   SHA256SUMS: $(wc -l <"$dir/SHA256SUMS") files"
  else log "FAIL SHA256SUMS"; rc=1; fi
  local listed
  listed=$(find "$dir" -mindepth 1 -maxdepth 1 ! -name SHA256SUMS -printf '%f\n' | sort | tr '\n' ' ')
  [ "$listed" = "$(awk '{print $2}' "$dir/SHA256SUMS" | sort | tr '\n' ' ')" ] \
    || { log "FAIL SHA256SUMS does not list exactly the files of $dir ($listed)"; rc=1; }
  # The Krew manifest: each platform's sha256 is its archive's, the archive holds the binary and
  # the LICENSE the manifest names, no placeholder left.
  python3 - "$dir" "$REPO/LICENSE" <<'PY' || rc=1
import hashlib, json, os, sys, tarfile, yaml
d, license_file = sys.argv[1:]
rec = json.load(open(os.path.join(d, "release.json")))
m = yaml.safe_load(open(os.path.join(d, rec["krew"]["manifest"])))
bad = []
if m["spec"]["version"] != "v" + rec["version"]:
    bad.append(f"spec.version {m['spec']['version']}, the release is v{rec['version']}")
for p in m["spec"]["platforms"]:
    name = os.path.basename(p["uri"])
    if "example.invalid" in p["uri"] or set(p["sha256"]) == {"0"}:
        bad.append(f"placeholder left: {p['uri']} {p['sha256']}")
    path = os.path.join(d, name)
    if not os.path.exists(path):
        bad.append(f"{name} (uri {p['uri']}) is not in the release"); continue
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if got != p["sha256"]:
        bad.append(f"{name}: manifest sha256 {p['sha256']}, archive {got}")
    with tarfile.open(path) as t:
        names = set(t.getnames())
        for f in p["files"]:
            if f["from"] not in names: bad.append(f"{name} lacks {f['from']}")
        if p["bin"] not in names: bad.append(f"{name} lacks the bin {p['bin']}")
        if "LICENSE" in names and t.extractfile("LICENSE").read() != open(license_file, "rb").read():
            bad.append(f"{name}: LICENSE is not the repository's")
    if not bad:
        print(f"[release] ok   krew: {name} sha256 {got} = sidecarset.yaml's, holds {' '.join(sorted(names))}", file=sys.stderr)
for b in bad: print(f"[release] FAIL krew: {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  # The image archive: an OCI layout whose manifest digest is the one recorded, as a registry
  # computes it (crane push + digest).
  local image digest registry crane started=0 got
  image=$(xtask json-field "$dir/release.json" image.file)
  digest=$(xtask json-field "$dir/release.json" image.digest)
  [ "$(cat "$dir/$image.digest")" = "$digest" ] || { log "FAIL $image.digest is not release.json's $digest"; rc=1; }
  eval "$(hack/tools.sh crane)"
  crane=$CRANE_BIN/crane
  registry=${REGISTRY:-}
  if [ -z "$registry" ]; then
    if ! hack/registry.sh env >/dev/null 2>&1; then started=1; fi
    eval "$(hack/registry.sh up 2>/dev/null)"
    registry=$SSO_REGISTRY
  fi
  got=$(push_layout "$crane" "$dir/$image" "$registry/release-verify/sidecarset-operator:$(xtask json-field "$dir/release.json" version)" --insecure)
  if [ "${got#*@}" = "$digest" ]; then log "ok   image: $image is an OCI layout; pushed with crane, the registry computes $digest (recorded)"
  else log "FAIL image: $image pushed with crane has digest ${got#*@}, release.json says $digest"; rc=1; fi
  # The chart, where it was pushed (when that registry answers from here).
  local chart_ref chart_digest remote
  chart_ref=$(xtask json-field "$dir/release.json" chart.oci):$(xtask json-field "$dir/release.json" chart.tag)
  chart_ref=${chart_ref#oci://}
  chart_digest=$(xtask json-field "$dir/release.json" chart.digest)
  if remote=$("$crane" digest --insecure "$chart_ref" 2>/dev/null); then
    if [ "$remote" = "$chart_digest" ]; then log "ok   chart: $chart_ref has the recorded digest $chart_digest"
    else log "FAIL chart: $chart_ref has digest $remote, release.json says $chart_digest"; rc=1; fi
    # The archive in the registry is the release's file.
    local layer
    layer=$("$crane" manifest --insecure "$chart_ref" | python3 -c '
import json, sys
print([l["digest"] for l in json.load(sys.stdin)["layers"] if l["mediaType"] == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"][0])')
    if [ "$layer" = "sha256:$(xtask json-field "$dir/release.json" chart.sha256)" ]; then
      log "ok   chart: its content layer is the release's chart archive"
    else
      log "FAIL chart: the registry's chart layer $layer is not the release's archive"; rc=1
    fi
  else
    log "skip chart: $chart_ref does not answer from here (its digest is $chart_digest)"
  fi
  # The binary's embedded dependency list (cargo auditable) is Cargo.lock's.
  verify_audit_data "$dir" || rc=1
  # Signatures, attestations, the Helm provenance file (with the public keys only).
  local image_ref
  image_ref=$(xtask json-field "$dir/release.json" image.pushed)
  if [ -z "$image_ref" ]; then
    log "FAIL signatures: the release records no pushed image"; rc=1
  elif "$crane" digest --insecure "$image_ref" >/dev/null 2>&1; then
    REGISTRY_INSECURE=1 hack/supply-chain.sh verify "$dir" || rc=1
  else
    log "skip signatures: $image_ref does not answer from here"
  fi
  if [ "$started" = 1 ]; then hack/registry.sh down; fi
  [ "$rc" = 0 ] || die "the release in $dir does not verify (see above)"
  log "the release in $dir verifies"
}

# verify_audit_data DIR: the binary of the Krew archive carries its dependency list (section
# .dep-v0, zlib-compressed JSON, written by cargo auditable): the operator at the release's
# version is its root, and every package in it is in Cargo.lock at that version.
verify_audit_data() {
  local dir=$1 krew w
  krew=$(xtask json-field "$dir/release.json" krew.file)
  w=$(mktemp -d)
  tar -xzf "$dir/$krew" -C "$w" kubectl-sidecarset
  if ! objcopy --dump-section ".dep-v0=$w/dep" "$w/kubectl-sidecarset" "$w/stripped" 2>/dev/null; then
    log "FAIL audit data: the binary in $krew has no .dep-v0 section (not built with cargo auditable)"; rm -rf "$w"; return 1
  fi
  local rc=0
  python3 - "$w/dep" "$REPO/Cargo.lock" "$(xtask json-field "$dir/release.json" version)" <<'PY' || rc=1
import json, sys, tomllib, zlib
dep, lock, version = sys.argv[1:]
pk = json.loads(zlib.decompress(open(dep, "rb").read()))["packages"]
locked = {(p["name"], p["version"]) for p in tomllib.load(open(lock, "rb"))["package"]}
roots = [p for p in pk if p.get("root")]
bad = [f"{p['name']} {p['version']}" for p in pk if (p["name"], p["version"]) not in locked]
if [(r["name"], r["version"]) for r in roots] != [("sidecarset-operator", version)]:
    bad.append(f"root {roots}, expected sidecarset-operator {version}")
if bad:
    sys.exit(f"[release] FAIL audit data: not in Cargo.lock: {', '.join(bad)}")
print(f"[release] ok   audit data: the binary lists {len(pk)} packages (cargo auditable), all at Cargo.lock's versions", file=sys.stderr)
PY
  rm -rf "$w"
  return "$rc"
}

# The same commit, built twice in different directories: the same binary and image digest.
cmd_reproduce() {
  local dest=${1:?usage: hack/release.sh reproduce OUT_DIR}
  command -v git >/dev/null || die "git is needed"
  release_version
  local commit base t=$SECONDS
  commit=$(git rev-parse HEAD)
  export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
  base=${SSO_WORK:-$REPO/.local}/reproduce
  mkdir -p "$base"
  base=$(cd "$base" && pwd)
  # Two checkouts of HEAD at paths of different lengths; one target directory: its dependencies
  # are built once, the workspace's crates twice, once from each checkout. (Cargo names a
  # workspace crate's artifacts by its path inside the workspace, so both checkouts share them:
  # they are cleaned before each build, or the second would find the first's fresh and reuse it.)
  local a=$base/one/sidecarset-operator b=$base/second-checkout/src x bin digests=() sums=()
  for x in "$a" "$b"; do
    rm -rf "$x"
    git clone -q --shared --no-checkout "$REPO" "$x"
    git -C "$x" checkout -q --detach "$commit"
  done
  local i=0
  for x in "$a" "$b"; do
    i=$((i + 1))
    (cd "$x" && CARGO_TARGET_DIR=$base/target cargo clean -q --release -p sidecarset-operator -p sidecarset-core -p sidecarset-cli) \
      || die "cargo clean of the workspace's crates failed"
    bin=$(build_binary "$x" "$base/target")
    cp "$bin" "$base/bin-$i"
    sums+=("$(sha256sum "$base/bin-$i" | cut -d' ' -f1)")
    SSO_IMAGE_VERSION=$VERSION SSO_IMAGE_OCI_ARCHIVE=$base/image-$i.oci.tar SSO_IMAGE_OCI_TAG=$VERSION \
      hack/images.sh operator "$base/bin-$i" "$base/images-$i" >/dev/null 2>&1 || die "hack/images.sh operator failed for build $i"
    digests+=("$(cat "$base/image-$i.oci.tar.digest")")
    log "build $i in $x: binary sha256 ${sums[-1]}, image $(basename "$base/image-$i.oci.tar") ${digests[-1]}"
  done
  [ "${sums[0]}" = "${sums[1]}" ] || die "the two builds of $commit differ: binaries ${sums[0]} and ${sums[1]} ($base/bin-1, $base/bin-2)"
  [ "${digests[0]}" = "${digests[1]}" ] || die "the two images of $commit differ: ${digests[0]} and ${digests[1]}"
  mkdir -p "$dest"
  cp "$base/bin-1" "$dest/sidecarset-operator"
  rm -rf "$a" "$b" "$base/images-1" "$base/images-2" "$base/image-1.oci.tar" "$base/image-2.oci.tar"
  log "reproducible: commit ${commit:0:12} built in two directories: binary sha256 ${sums[0]}, image ${digests[0]} ($((SECONDS - t)) s)"
}

case ${1:-release} in
  release) cmd_release ;;
  reproduce) shift; cmd_reproduce "$@" ;;
  verify) shift; cmd_verify "$@" ;;
  *) echo "usage: $0 [release] | reproduce OUT_DIR | verify DIR" >&2; exit 2 ;;
esac
