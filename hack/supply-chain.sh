#!/usr/bin/env bash
# The release's supply-chain artifacts, for hack/release.sh (which runs these; not a user entry):
#
#   hack/supply-chain.sh sbom BIN IMAGE_TAR OUT_DIR VERSION
#       OUT_DIR/sidecarset-operator_vVERSION.cdx.json        CycloneDX 1.5 of the operator binary
#           from the Cargo graph (cargo-cyclonedx, pinned in hack/tools.sh; Linux targets only,
#           no dev dependencies), with the binary's sha256
#       OUT_DIR/sidecarset-operator_vVERSION.image.cdx.json  CycloneDX 1.5 of the image (its
#           manifest digest, from IMAGE_TAR.digest): the
#           binary (and its crates, from the file above) and the Debian packages whose files the
#           image holds (the shared libraries the binary links, the CA certificates), read from
#           dpkg on the machine that built it
#       Time stamps are SOURCE_DATE_EPOCH and the serial numbers derive from the content, so the
#       same commit gives the same files.
#   hack/supply-chain.sh provenance OUT_FILE VERSION COMMIT DIRTY
#       an SLSA v1 provenance predicate (build level 1) for the image: the command, the source
#       commit, the toolchain, SOURCE_DATE_EPOCH
#   hack/supply-chain.sh sign DIR
#       cosign: sign the image and the OCI chart by digest (key COSIGN_KEY, password
#       COSIGN_PASSWORD, no transparency log), attach the image SBOM (--type cyclonedx) and the
#       provenance (--type slsaprovenance1) as attestations; the signed attestations are also
#       written to DIR/sidecarset-operator_vVERSION.intoto.jsonl (DSSE envelopes, one a line)
#   hack/supply-chain.sh verify DIR
#       by the digests of DIR/release.json, with the public keys only: cosign verify of the image
#       and the chart, verify-attestation of the SBOM and the provenance (their content must be
#       the release's files and the recorded commit), `helm verify` of the chart archive against
#       its .prov
#   hack/supply-chain.sh test-keys DIR
#       a throwaway key pair for tests: DIR/cosign.key (password in DIR/cosign.password),
#       DIR/cosign.pub, a PGP key in DIR/gnupg with DIR/secring.gpg and DIR/pubring.gpg (legacy
#       keyrings, as helm reads them); prints the env lines for `eval`
#
# Env: COSIGN_KEY, COSIGN_PASSWORD (sign); COSIGN_PUB (verify: the cosign public key),
# HELM_KEYRING (verify: a public keyring with the chart's PGP key); REGISTRY_INSECURE=1 (plain
# HTTP registry); BUILDER_ID, SOURCE_URI (provenance, see there).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

log() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] error: %s\n' "$*" >&2; exit 1; }

xtask() { cargo run -q --locked -p xtask -- "$@"; }

cosign_env() {
  eval "$(hack/tools.sh cosign)"
  COSIGN=$COSIGN_BIN/cosign
  REG_FLAGS=()
  [ "${REGISTRY_INSECURE:-0}" != 1 ] || REG_FLAGS=(--allow-insecure-registry --allow-http-registry)
}

cmd_sbom() {
  local bin=$1 image=$2 out=$3 version=$4
  eval "$(hack/tools.sh cargo-cyclonedx)"
  local w
  w=$(mktemp -d)
  # cargo-cyclonedx writes next to every member's Cargo.toml: the operator's is taken, all removed.
  local name=sbom-$$
  PATH=$CARGO_CYCLONEDX_BIN:$PATH cargo cyclonedx --quiet --format json --spec-version 1.5 \
    --manifest-path crates/operator/Cargo.toml --target x86_64-unknown-linux-gnu --no-build-deps \
    --override-filename "$name" >"$w/log" 2>&1 || { cat "$w/log" >&2; find crates -name "$name.json" -delete; die "cargo cyclonedx failed"; }
  mv "crates/operator/$name.json" "$w/raw.json"
  find crates -name "$name.json" -delete
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' >"$w/libs"
  echo /etc/ssl/certs/ca-certificates.crt >>"$w/libs"
  local f pkg
  while read -r f; do
    pkg=$(dpkg -S "$f" 2>/dev/null | head -n1 | cut -d: -f1) || true
    [ -n "$pkg" ] || pkg=$(dpkg -S "$(readlink -f "$f")" 2>/dev/null | head -n1 | cut -d: -f1) || true
    # The CA bundle is written by update-ca-certificates from the package's certificates.
    [ -n "$pkg" ] || [ "$f" != /etc/ssl/certs/ca-certificates.crt ] || pkg=ca-certificates
    [ -n "$pkg" ] || die "no Debian package owns $f (the image SBOM names every file's package)"
    printf '%s %s %s\n' "$f" "$pkg" "$(dpkg-query -W -f='${Version} ${Architecture}' "$pkg")"
  done <"$w/libs" >"$w/debs"
  python3 - "$w/raw.json" "$w/debs" "$bin" "$image" "$out" "$version" "${SOURCE_DATE_EPOCH:?}" "$REPO" <<'PY'
import hashlib, json, os, sys, time, uuid
raw, debs, binary, image, out, version, epoch, repo = sys.argv[1:]
ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()
def finish(doc, name):
    # A serial number from the content (without it), so that the same input gives the same file.
    doc["metadata"]["timestamp"] = ts
    doc.pop("serialNumber", None)
    body = json.dumps(doc, sort_keys=True).encode()
    doc["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, hashlib.sha256(body).hexdigest()))
    with open(os.path.join(out, name), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
# The workspace's path (in the bom-refs of its crates) as the binary names it (hack/rustc-remap.sh).
d = json.loads(open(raw).read().replace(repo.rstrip("/"), "/build/sidecarset-operator"))
main = d["metadata"]["component"]
if main.get("name") != "sidecarset-operator":
    sys.exit(f"cargo cyclonedx described {main.get('name')}, not sidecarset-operator")
# The binary itself, as built: its hash under the application component.
main.setdefault("hashes", []).append({"alg": "SHA-256", "content": sha(binary)})
main["version"] = version
d["metadata"].pop("tools", None)
d["metadata"]["tools"] = {"components": [{"type": "application", "name": "cargo-cyclonedx"}]}
finish(d, f"sidecarset-operator_v{version}.cdx.json")
# The image (its manifest digest): the binary (with the crates above) and the Debian packages of
# its other files.
image_digest = open(image + ".digest").read().strip().split(":", 1)[1]
img = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
       "metadata": {"component": {"type": "container", "name": "sidecarset-operator", "version": version,
                                  "bom-ref": "image",
                                  "hashes": [{"alg": "SHA-256", "content": image_digest}],
                                  "description": "the operator image (OCI archive " + os.path.basename(image) + ")"}},
       "components": [], "dependencies": []}
app = dict(main)
app["bom-ref"] = main.get("bom-ref", "sidecarset-operator")
app["components"] = d.get("components", [])
img["components"].append(app)
seen = {}
for line in open(debs):
    path, pkg, ver, arch = line.split()
    c = seen.get(pkg)
    if c is None:
        c = seen[pkg] = {"type": "library" if pkg != "ca-certificates" else "data", "name": pkg, "version": ver,
                         "bom-ref": f"pkg:deb/debian/{pkg}@{ver}?arch={arch}", "purl": f"pkg:deb/debian/{pkg}@{ver}?arch={arch}",
                         "properties": []}
        img["components"].append(c)
    c["properties"].append({"name": "image:file", "value": path})
img["dependencies"].append({"ref": "image", "dependsOn": [app["bom-ref"]] + [c["bom-ref"] for c in seen.values()]})
img["dependencies"].extend(d.get("dependencies", []))
finish(img, f"sidecarset-operator_v{version}.image.cdx.json")
print(f"[release] sbom: {len(d.get('components', []))} crates; image: the binary and {len(seen)} Debian packages ({', '.join(sorted(seen))})", file=sys.stderr)
PY
  rm -rf "$w"
}

cmd_provenance() {
  local out=$1 version=$2 commit=$3 dirty=$4
  local source=${SOURCE_URI:-$(git remote get-url origin 2>/dev/null || echo "urn:sidecarset-operator:source")}
  case $source in /* | file:*) source=urn:sidecarset-operator:source ;; esac
  python3 - "$out" "$version" "$commit" "$dirty" "$source" "${BUILDER_ID:-urn:sidecarset-operator:builder:make-release}" \
    "$(rustc --version)" "$(cargo --version)" "${SOURCE_DATE_EPOCH:?}" "${RELEASE_COMMAND:-make release}" <<'PY'
import json, sys, time
out, version, commit, dirty, source, builder, rustc, cargo, epoch, command = sys.argv[1:]
ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))
pred = {
  "buildDefinition": {
    "buildType": "urn:sidecarset-operator:build-type:make-release:v1",
    "externalParameters": {"command": command, "version": version,
                           "source": {"uri": "git+" + source, "digest": {"gitCommit": commit}},
                           "workingTreeDirty": dirty == "true"},
    "internalParameters": {"SOURCE_DATE_EPOCH": epoch, "rustc": rustc, "cargo": cargo,
                           "binaryBuild": "cargo auditable build --release --locked --bin sidecarset-operator (paths remapped)",
                           "imageBuild": "hack/images.sh operator (umoci)"},
    "resolvedDependencies": [{"uri": "git+" + source, "digest": {"gitCommit": commit}}],
  },
  # (No invocationId: cosign's predicate type spells it invocationID and would change the content.)
  "runDetails": {"builder": {"id": builder}, "metadata": {"startedOn": ts}},
}
json.dump(pred, open(out, "w"), indent=2, sort_keys=True)
PY
}

# ref_of DIR KIND: REPO@DIGEST of the image or chart recorded in DIR/release.json
ref_of() {
  local dir=$1
  case $2 in
    image) xtask json-field "$dir/release.json" image.pushed ;;
    chart) local oci
      oci=$(xtask json-field "$dir/release.json" chart.oci)
      echo "${oci#oci://}@$(xtask json-field "$dir/release.json" chart.digest)" ;;
  esac
}

cmd_sign() {
  local dir=$1 version image chart
  [ -s "${COSIGN_KEY:-}" ] || die "COSIGN_KEY (the cosign private key file) is needed to sign"
  cosign_env
  version=$(xtask json-field "$dir/release.json" version)
  image=$(ref_of "$dir" image)
  chart=$(ref_of "$dir" chart)
  [ "${image#*@sha256:}" != "$image" ] || die "the release has no image reference by digest (IMAGE_REPO)"
  local flags=(--key "$COSIGN_KEY" --tlog-upload=false --yes "${REG_FLAGS[@]}")
  "$COSIGN" sign "${flags[@]}" "$image" >/dev/null 2>"$dir/.cosign.log" || { cat "$dir/.cosign.log" >&2; die "cosign sign $image failed"; }
  "$COSIGN" sign "${flags[@]}" "$chart" >/dev/null 2>"$dir/.cosign.log" || { cat "$dir/.cosign.log" >&2; die "cosign sign $chart failed"; }
  "$COSIGN" attest "${flags[@]}" --type cyclonedx --predicate "$dir/sidecarset-operator_v$version.image.cdx.json" "$image" \
    >/dev/null 2>"$dir/.cosign.log" || { cat "$dir/.cosign.log" >&2; die "cosign attest (SBOM) $image failed"; }
  "$COSIGN" attest "${flags[@]}" --type slsaprovenance1 --predicate "$dir/provenance.json" "$image" \
    >/dev/null 2>"$dir/.cosign.log" || { cat "$dir/.cosign.log" >&2; die "cosign attest (provenance) $image failed"; }
  "$COSIGN" download attestation "${REG_FLAGS[@]}" "$image" >"$dir/sidecarset-operator_v$version.intoto.jsonl" 2>"$dir/.cosign.log" \
    || { cat "$dir/.cosign.log" >&2; die "cosign download attestation $image failed"; }
  rm -f "$dir/.cosign.log"
  log "signed $image and $chart (cosign, key $(basename "$COSIGN_KEY")); attested the image SBOM and provenance"
}

cmd_verify() {
  local dir=$1 rc=0 version image chart commit
  cosign_env
  version=$(xtask json-field "$dir/release.json" version)
  commit=$(xtask json-field "$dir/release.json" commit)
  image=$(ref_of "$dir" image)
  chart=$(ref_of "$dir" chart)
  local pub=${COSIGN_PUB:-} ring=${HELM_KEYRING:-}
  if [ -z "$pub" ] || [ -z "$ring" ]; then
    log "warning: COSIGN_PUB / HELM_KEYRING not given: verifying with the public keys in $dir itself, which proves integrity, not origin"
    pub=${pub:-$dir/cosign.pub}
    ring=${ring:-$dir/.pubring.gpg}
    [ -n "${HELM_KEYRING:-}" ] || gpg --dearmor <"$dir/sidecarset-operator-release.asc" >"$ring"
  fi
  local vflags=(--key "$pub" --insecure-ignore-tlog=true --insecure-ignore-sct=true "${REG_FLAGS[@]}") w
  w=$(mktemp -d)
  local what ref
  for what in image chart; do
    ref=$(ref_of "$dir" "$what")
    if "$COSIGN" verify "${vflags[@]}" "$ref" >"$w/out" 2>"$w/err"; then
      log "ok   signature: the $what $ref (cosign, $(basename "$pub"))"
    else log "FAIL signature: the $what $ref: $(grep -v '^WARNING' "$w/err" | tail -n1)"; rc=1; fi
  done
  # The attestations: signed with the key, and their content is the release's.
  local type file
  for type in cyclonedx slsaprovenance1; do
    if "$COSIGN" verify-attestation "${vflags[@]}" --type "$type" "$image" >"$w/att" 2>"$w/err"; then
      file=$dir/sidecarset-operator_v$version.image.cdx.json
      [ "$type" = cyclonedx ] || file=$dir/provenance.json
      if python3 - "$w/att" "$file" "$commit" "$type" "${image#*@}" <<'PY'
import base64, json, sys
att, file, commit, kind, digest = sys.argv[1:]
want = json.load(open(file))
for line in open(att):
    stmt = json.loads(base64.b64decode(json.loads(line)["payload"]))
    if [s["digest"]["sha256"] for s in stmt["subject"]] != [digest.split(":", 1)[1]]:
        continue
    if stmt["predicate"] == want:
        if kind != "cyclonedx" and stmt["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"] != commit:
            sys.exit("the provenance names another commit")
        sys.exit(0)
sys.exit(f"no {kind} attestation of {digest} has the content of {file}")
PY
      then log "ok   attestation: $type of the image, signed, its content is $(basename "$file")"
      else log "FAIL attestation: $type of the image does not hold $(basename "$file")"; rc=1; fi
    else log "FAIL attestation: $type of $image: $(grep -v '^WARNING' "$w/err" | tail -n1)"; rc=1; fi
  done
  # The chart archive's Helm provenance file.
  eval "$(hack/tools.sh helm)"
  local tgz
  tgz=$(xtask json-field "$dir/release.json" chart.file)
  if "$HELM_BIN/helm" verify --keyring "$ring" "$dir/$tgz" >"$w/out" 2>&1; then
    log "ok   helm provenance: $tgz.prov ($(grep -o 'Signed by: .*' "$w/out" | head -n1))"
  else log "FAIL helm provenance: $tgz: $(tail -n1 "$w/out")"; rc=1; fi
  rm -rf "$w" "$dir/.pubring.gpg"
  return "$rc"
}

cmd_test_keys() {
  local d=$1
  mkdir -p "$d"
  cosign_env
  rm -f "$d/cosign.key" "$d/cosign.pub"
  openssl rand -hex 16 >"$d/cosign.password"
  ( cd "$d" && COSIGN_PASSWORD=$(cat cosign.password) "$COSIGN" generate-key-pair >/dev/null 2>&1 ) || die "cosign generate-key-pair failed"
  local g=$d/gnupg
  # A gpg-agent of an earlier run may still serve that directory: stopped before it goes.
  [ ! -d "$g" ] || gpgconf --homedir "$g" --kill gpg-agent 2>/dev/null || true
  rm -rf "$g"
  mkdir -p "$g"
  chmod 0700 "$g"
  GNUPGHOME=$g gpg --batch --quiet --passphrase '' --quick-gen-key "sidecarset-operator release test <release-test@localhost>" ed25519 sign 1d 2>"$d/gpg.log" \
    || { cat "$d/gpg.log" >&2; die "gpg --quick-gen-key failed"; }
  GNUPGHOME=$g gpg --batch --quiet --export-secret-keys >"$d/secring.gpg"
  GNUPGHOME=$g gpg --batch --quiet --export >"$d/pubring.gpg"
  printf 'export COSIGN_KEY=%q COSIGN_PASSWORD=%q COSIGN_PUB=%q HELM_SIGN_KEY=%q HELM_SECRING=%q HELM_KEYRING=%q GNUPGHOME=%q\n' \
    "$d/cosign.key" "$(cat "$d/cosign.password")" "$d/cosign.pub" "sidecarset-operator release test" "$d/secring.gpg" "$d/pubring.gpg" "$g"
}

case ${1:-} in
  sbom) shift; cmd_sbom "$@" ;;
  provenance) shift; cmd_provenance "$@" ;;
  sign) shift; cmd_sign "$@" ;;
  verify) shift; cmd_verify "$@" ;;
  test-keys) shift; cmd_test_keys "$@" ;;
  *) echo "usage: $0 sbom BIN IMAGE_TAR OUT_DIR VERSION | provenance OUT VERSION COMMIT DIRTY | sign DIR | verify DIR | test-keys DIR" >&2; exit 2 ;;
esac
