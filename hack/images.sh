#!/usr/bin/env bash
# Container images without a registry, for the real node of hack/node.sh: OCI images built with
# umoci from local files, written as docker-archive tarballs (skopeo) that `ctr images import`
# takes.
#
#   hack/images.sh test OUT          pause + busybox test images (from busybox-static):
#                                      localhost/sso-e2e/pause:1        the pod sandbox
#                                      localhost/sso-e2e/busybox:v1     /etc/image-version = v1
#                                      localhost/sso-e2e/busybox:v2     ... v2
#                                      localhost/sso-e2e/busybox:v3     ... v3
#                                    (hack/node.sh also tags v2 as :v2-alias; :v404 never exists)
#                                      localhost/sso-e2e/hot:v1 v2 v3   a hot-upgrade sidecar (/bin/hot,
#                                                                       below), /etc/image-version v1..v3
#                                      localhost/sso-e2e/hot:empty      its empty image (the same
#                                                                       program, idle)
#   hack/images.sh operator BIN OUT  the operator's image from the operator binary BIN, with the
#                                    runtime layout of the Dockerfile's final stage (distroless
#                                    cc-debian12:nonroot): /sidecarset-operator, the glibc
#                                    libraries it links, CA certificates, user 65532:65532,
#                                    ENTRYPOINT ["/sidecarset-operator"], CMD ["run"],
#                                    EXPOSE 9443, the Dockerfile's labels
#   hack/images.sh ids OUT           the image IDs a containerd kubelet reports for the busybox
#                                    tags in OUT (the config digest), one "image id" per line, to
#                                    OUT/image-ids (crates/e2e/tests/real_node.rs reads them)
#   hack/images.sh olm OLM_BIN OUT   OLM's toolbox image (OUT/olm-toolbox.tar, ref in
#                                    SSO_OLM_TOOLBOX_IMAGE): busybox (sh, cat, gzip, cp), OLM's
#                                    /bin/cpb and /bin/copy-content and a static /bin/opm from
#                                    hack/tools.sh olm; the util image and the opm image of
#                                    OLM's bundle unpack Jobs and catalog pods, and an index
#                                    image (empty /configs; ENTRYPOINT opm, CMD serve /configs)
#   hack/images.sh bundle DIR REF OUT  an OLM bundle image (registry+v1) from a bundle directory
#                                    (manifests/, metadata/annotations.yaml): those two
#                                    directories on an empty base, labelled with the annotations
#                                    (as bundle.Dockerfile), as OUT (a docker-archive) named REF
#   hack/images.sh check OUT         the operator image in OUT agrees with the Dockerfile: user,
#                                    entrypoint, cmd, exposed ports, label keys; its binary runs
#                                    in the image's root filesystem as that user
#
# Env: SSO_OPERATOR_IMAGE (default localhost/sidecarset-operator:e2e), SSO_IMAGE_VERSION (the
# version label; default the Cargo.toml version); for `operator` also SSO_IMAGE_OCI_ARCHIVE=FILE
# (the image also as an OCI image layout in the tar FILE, tagged SSO_IMAGE_OCI_TAG (default the
# version), its manifest digest in FILE.digest: what hack/release.sh ships) and SOURCE_DATE_EPOCH
# (every file's time and the image's creation time: the same binary gives the same digest).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OPERATOR_IMAGE=${SSO_OPERATOR_IMAGE:-localhost/sidecarset-operator:e2e}
TEST_REPO=localhost/sso-e2e

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

need() {
  local c
  for c in umoci skopeo; do command -v "$c" >/dev/null || die "$c is missing (Debian package $c; hack/node.sh deps installs it)"; done
}

# new_layout DIR: an empty OCI layout with an empty image "base"; unpack it into DIR/b
new_bundle() {
  local d=$1
  rm -rf "$d/oci" "$d/b"
  umoci init --layout "$d/oci"
  umoci new --image "$d/oci:base"
  umoci unpack --image "$d/oci:base" "$d/b" >/dev/null
}

# export_archive DIR TAG REF OUTFILE
export_archive() {
  skopeo --insecure-policy copy -q "oci:$1/oci:$2" "docker-archive:$4.tmp:$3"
  mv "$4.tmp" "$4"
}

cmd_test() {
  local out=${1:?usage: hack/images.sh test OUT}
  need
  { [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1; } || die "/bin/busybox is missing (Debian package busybox-static)"
  if ldd /bin/busybox >/dev/null 2>&1; then die "/bin/busybox is dynamically linked; the test images need busybox-static"; fi
  mkdir -p "$out"
  local w
  w=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$w"' RETURN
  mk() { # mk TAG VERSION REF ENTRYPOINT...
    local tag=$1 ver=$2 ref=$3 a
    shift 3
    rm -rf "$w/b"
    umoci unpack --image "$w/oci:base" "$w/b" >/dev/null
    local r=$w/b/rootfs
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/proc" "$r/sys" "$r/dev"
    chmod 1777 "$r/tmp"
    cp /bin/busybox "$r/bin/busybox"
    if [ "$tag" != pause ]; then
      for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
      echo "$ver" >"$r/etc/image-version"
    fi
    case $tag in hot-*) hot_program >"$r/bin/hot"; chmod 0755 "$r/bin/hot" ;; esac
    echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"
    echo 'root:x:0:' >"$r/etc/group"
    umoci repack --image "$w/oci:$tag" "$w/b"
    local args=()
    for a in "$@"; do args+=(--config.entrypoint "$a"); done
    umoci config --image "$w/oci:$tag" "${args[@]}" --config.env PATH=/bin --config.workingdir / --author sidecarset-operator-e2e
    export_archive "$w" "$tag" "$ref" "$out/$tag.tar"
  }
  umoci init --layout "$w/oci"
  umoci new --image "$w/oci:base"
  mk pause pause "$TEST_REPO/pause:1" /bin/busybox sleep infinity
  mk busybox-v1 v1 "$TEST_REPO/busybox:v1" /bin/sh
  mk busybox-v2 v2 "$TEST_REPO/busybox:v2" /bin/sh
  mk busybox-v3 v3 "$TEST_REPO/busybox:v3" /bin/sh
  for t in v1 v2 v3 empty; do mk "hot-$t" "$t" "$TEST_REPO/hot:$t" /bin/hot; done
  log "test images in $out: $(cd "$out" && printf '%s ' pause.tar busybox-v*.tar hot-*.tar)"
}

# The hot-upgrade test sidecar (/bin/hot of the hot images). Its two containers share the
# SidecarSet's volume /hand. An instance that starts while another one serves (the owner in
# /hand/owner is not itself) asks it to hand over (/hand/request) and becomes ready
# (/tmp/ready, the readiness probe) only once the owner has named it the new owner; the owner
# checks for requests every 0.2 s and keeps running (ready) until it is stopped, as a proxy
# drains. Instances are named by $SIDECARSET_VERSION (OpenKruise's env of hot-upgrade
# containers). The empty image only becomes ready and waits. Every step is logged to stdout and
# /hand/log.
hot_program() {
  cat <<'PROGRAM'
#!/bin/sh
v=$(cat /etc/image-version)
me=${SIDECARSET_VERSION:-unset}
d=/hand
say() { echo "hot $v version $me: $*"; echo "$(date +%s) $v $me: $*" >>"$d/log"; }
put() { echo "$2" >"$d/.$1.$$" && mv "$d/.$1.$$" "$d/$1"; }
rm -f /tmp/ready
trap 'say stopped; exit 0' TERM
if [ "$v" = empty ]; then
  echo "hot empty: idle"
  touch /tmp/ready
  while true; do sleep 1; done
fi
owner=$(cat "$d/owner" 2>/dev/null)
if [ -n "$owner" ] && [ "$owner" != "$me" ]; then
  say "asks $owner to hand over"
  put request "$me"
  i=0
  while [ "$(cat "$d/owner" 2>/dev/null)" != "$me" ]; do
    sleep 0.2
    i=$((i + 1))
    if [ "$i" -ge 300 ]; then say "no answer from $owner in 60 s: takes over"; put owner "$me"; fi
  done
  say "took over from $owner"
else
  put owner "$me"
  say "serves (first)"
fi
touch /tmp/ready
while true; do
  req=$(cat "$d/request" 2>/dev/null)
  if [ -n "$req" ] && [ "$req" != "$me" ] && [ "$(cat "$d/owner" 2>/dev/null)" = "$me" ]; then
    put owner "$req"
    rm -f "$d/request"
    say "handed over to $req"
  fi
  sleep 0.2
done
PROGRAM
}

# The runtime layout of the Dockerfile's final stage. `check` compares it with the Dockerfile.
OP_USER=65532:65532
OP_ENTRYPOINT=/sidecarset-operator
OP_CMD=run
OP_PORT=9443/tcp

cmd_operator() {
  local bin=${1:?usage: hack/images.sh operator BIN OUT} out=${2:?usage: hack/images.sh operator BIN OUT}
  need
  [ -x "$bin" ] || die "$bin is not an executable (cargo build --bin sidecarset-operator)"
  [ -s /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt is missing (Debian package ca-certificates)"
  mkdir -p "$out"
  local w version lib
  w=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$w"' RETURN
  version=${SSO_IMAGE_VERSION:-$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)}
  umoci init --layout "$w/oci"
  umoci new --image "$w/oci:base"
  umoci unpack --image "$w/oci:base" "$w/b" >/dev/null
  local r=$w/b/rootfs
  install -D -m 0755 "$bin" "$r/sidecarset-operator"
  # The shared libraries the binary links (glibc, libgcc_s), at the same paths; distroless cc has
  # the same ones from the same Debian release.
  while read -r lib; do
    [ -n "$lib" ] || continue
    install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
  install -D -m 0644 "$REPO/LICENSE" "$r/LICENSE"
  mkdir -p "$r/tmp" "$r/home/nonroot" "$r/proc" "$r/sys" "$r/dev"
  chmod 1777 "$r/tmp"
  chown 65532:65532 "$r/home/nonroot"
  chmod 0700 "$r/home/nonroot"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$r/etc/group"
  local stamp=()
  if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
    local created
    created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
    find "$r" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    stamp=(--history.created "$created")
    umoci repack "${stamp[@]}" --image "$w/oci:operator" "$w/b"
    stamp+=(--created "$created")
  else
    umoci repack --image "$w/oci:operator" "$w/b"
  fi
  umoci config "${stamp[@]}" --image "$w/oci:operator" --author sidecarset-operator \
    --config.user "$OP_USER" --config.entrypoint "$OP_ENTRYPOINT" --config.cmd "$OP_CMD" \
    --config.exposedports "$OP_PORT" --config.workingdir /home/nonroot \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --config.label org.opencontainers.image.title=sidecarset-operator \
    --config.label "org.opencontainers.image.description=Kubernetes operator that injects and upgrades sidecar containers, driven by OpenKruise-compatible SidecarSets" \
    --config.label org.opencontainers.image.source= \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label org.opencontainers.image.licenses=Apache-2.0
  export_archive "$w" operator "$OPERATOR_IMAGE" "$out/operator.tar"
  sha256sum "$bin" | cut -d' ' -f1 >"$out/operator.tar.bin-sha256"
  if [ -n "${SSO_IMAGE_OCI_ARCHIVE:-}" ]; then
    local oci=$SSO_IMAGE_OCI_ARCHIVE
    # Only the operator's image (not umoci's empty base), with umoci's manifest as it is.
    rm -f "$oci" "$oci.digest"
    skopeo --insecure-policy copy -q "oci:$w/oci:operator" "oci-archive:$oci.tmp:${SSO_IMAGE_OCI_TAG:-$version}"
    tar -xOf "$oci.tmp" index.json | python3 -c '
import json, sys
m = json.load(sys.stdin)["manifests"]
assert len(m) == 1, m
print(m[0]["digest"])' >"$oci.digest.tmp"
    python3 - "$w/oci/index.json" "$(cat "$oci.digest.tmp")" <<'PY' || die "skopeo changed the image's manifest on the way into $oci"
import json, sys
ms = [m for m in json.load(open(sys.argv[1]))["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "operator"]
sys.exit(0 if ms and ms[0]["digest"] == sys.argv[2] else 1)
PY
    mv "$oci.tmp" "$oci"
    mv "$oci.digest.tmp" "$oci.digest"
    log "operator image as an OCI archive: $oci ($(du -h "$oci" | cut -f1)), manifest digest $(cat "$oci.digest")"
  fi
  log "operator image $OPERATOR_IMAGE in $out/operator.tar ($(du -h "$out/operator.tar" | cut -f1))"
}

# OLM's toolbox: the roles OLM gives to its "util" and "opm" images (bundle unpack Jobs: init
# `cp -Rv /bin/cpb /util/cpb` from the util image, `opm alpha bundle extract` from the opm image;
# catalog pods with extractContent: /bin/copy-content and `opm serve`), in one image. As OLM's
# own image (its Dockerfile links busybox's cp to /bin/cp), user 1001, files world-readable.
cmd_olm() {
  local bin=${1:?usage: hack/images.sh olm OLM_BIN OUT} out=${2:?usage: hack/images.sh olm OLM_BIN OUT}
  local ref=${SSO_OLM_TOOLBOX_IMAGE:-localhost/sso-e2e/olm-toolbox:dev} w r a
  need
  for a in opm cpb copy-content; do [ -x "$bin/$a" ] || die "$bin/$a is missing (hack/tools.sh olm)"; done
  if ldd "$bin/opm" >/dev/null 2>&1; then die "$bin/opm is dynamically linked; the toolbox needs a static opm (hack/tools.sh olm)"; fi
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || die "/bin/busybox (static) is missing (Debian package busybox-static)"
  mkdir -p "$out"
  w=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$w"' RETURN
  new_bundle "$w"
  r=$w/b/rootfs
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/configs" "$r/proc" "$r/sys" "$r/dev"
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox"
  for a in sh cat gzip cp ls mkdir; do ln -s busybox "$r/bin/$a"; done
  for a in opm cpb copy-content; do install -m 0755 "$bin/$a" "$r/bin/$a"; done
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'olm:x:1001:0:olm:/tmp:/bin/sh' >"$r/etc/passwd"
  echo 'root:x:0:' >"$r/etc/group"
  umoci repack --image "$w/oci:toolbox" "$w/b"
  umoci config --image "$w/oci:toolbox" --author sidecarset-operator-e2e --config.user 1001 \
    --config.entrypoint /bin/opm --config.cmd serve --config.cmd /configs --config.cmd --cache-dir=/tmp/cache \
    --config.env PATH=/bin --config.workingdir / \
    --config.label operators.operatorframework.io.index.configs.v1=/configs
  export_archive "$w" toolbox "$ref" "$out/olm-toolbox.tar"
  log "OLM toolbox image $ref in $out/olm-toolbox.tar ($(du -h "$out/olm-toolbox.tar" | cut -f1))"
}

cmd_bundle() {
  local dir=${1:?usage: hack/images.sh bundle DIR REF OUT} ref=${2:?usage: hack/images.sh bundle DIR REF OUT}
  local out=${3:?usage: hack/images.sh bundle DIR REF OUT} w r labels=() kv
  need
  { [ -d "$dir/manifests" ] && [ -s "$dir/metadata/annotations.yaml" ]; } || die "$dir has no manifests/ and metadata/annotations.yaml"
  w=$(mktemp -d "$(dirname "$out")/.build.XXXXXX")
  trap 'rm -rf "$w"' RETURN
  new_bundle "$w"
  r=$w/b/rootfs
  cp -r "$dir/manifests" "$dir/metadata" "$r/"
  chmod -R a+rX "$r/manifests" "$r/metadata"
  while read -r kv; do labels+=(--config.label "$kv"); done < <(python3 -c '
import sys, yaml
for k, v in yaml.safe_load(open(sys.argv[1]))["annotations"].items():
    print(f"{k}={v}")' "$dir/metadata/annotations.yaml")
  umoci repack --image "$w/oci:bundle" "$w/b"
  umoci config --image "$w/oci:bundle" --author sidecarset-operator --config.workingdir / "${labels[@]}"
  export_archive "$w" bundle "$ref" "$out"
  log "bundle image $ref in $out ($(( ${#labels[@]} / 2 )) labels)"
}

# The directives of the Dockerfile's final stage, as JSON: {"user", "entrypoint", "cmd", "expose", "labels"}
dockerfile_final_stage() {
  python3 - "$REPO/Dockerfile" <<'EOF'
import json, re, shlex, sys
lines, cur = [], ""
for raw in open(sys.argv[1]):
    s = raw.rstrip("\n")
    if not cur and (s.lstrip().startswith("#") or not s.strip()):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "; continue
    lines.append(cur + s); cur = ""
stage = []
for l in lines:
    if re.match(r"(?i)^\s*FROM\s", l):
        stage = []
    stage.append(l.strip())
out = {"user": None, "entrypoint": None, "cmd": None, "expose": [], "labels": []}
for l in stage:
    word, _, rest = l.partition(" ")
    word, rest = word.upper(), rest.strip()
    if word == "USER":
        out["user"] = rest
    elif word in ("ENTRYPOINT", "CMD"):
        out[word.lower()] = json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]
    elif word == "EXPOSE":
        out["expose"] += [p if "/" in p else p + "/tcp" for p in rest.split()]
    elif word == "LABEL":
        out["labels"] += [kv.split("=", 1)[0] for kv in shlex.split(rest)]
print(json.dumps(out))
EOF
}

cmd_check() {
  local out=${1:?usage: hack/images.sh check OUT} want got w rc=0
  [ -s "$out/operator.tar" ] || die "$out/operator.tar does not exist (hack/images.sh operator BIN $out)"
  want=$(dockerfile_final_stage)
  got=$(skopeo inspect --config "docker-archive:$out/operator.tar" | python3 -c '
import json, sys
c = json.load(sys.stdin).get("config", {})
print(json.dumps({"user": c.get("User"), "entrypoint": c.get("Entrypoint"), "cmd": c.get("Cmd"),
                  "expose": sorted(c.get("ExposedPorts", {})), "labels": sorted(c.get("Labels", {}))}))')
  python3 - "$want" "$got" <<'EOF' || rc=1
import json, sys
want, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
want["expose"] = sorted(want["expose"]); want["labels"] = sorted(want["labels"])
bad = [k for k in want if want[k] != got.get(k)]
for k in want:
    print(f"[images] {'ok  ' if k not in bad else 'DIFF'} {k:10} Dockerfile {json.dumps(want[k])}  local image {json.dumps(got.get(k))}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
  # The binary starts in the image's root filesystem (its libraries are there) as the image's user.
  w=$(mktemp -d)
  mkdir -p "$w/oci"
  skopeo --insecure-policy copy -q "docker-archive:$out/operator.tar" "oci:$w/oci:x"
  umoci unpack --image "$w/oci:x" "$w/b" >/dev/null
  local user
  user=$(echo "$got" | python3 -c 'import json,sys; print(json.load(sys.stdin)["user"])')
  if ver=$(chroot --userspec="$user" "$w/b/rootfs" /sidecarset-operator --version 2>&1); then
    log "ok   runs       chroot as $user: $ver"
  else
    log "FAIL runs       chroot as $user: $ver"; rc=1
  fi
  if [ -s "$w/b/rootfs/etc/ssl/certs/ca-certificates.crt" ]; then
    log "ok   ca-certs   /etc/ssl/certs/ca-certificates.crt"
  else
    log "FAIL ca-certs   /etc/ssl/certs/ca-certificates.crt missing"; rc=1
  fi
  if cmp -s "$w/b/rootfs/LICENSE" "$REPO/LICENSE"; then
    log "ok   license    /LICENSE (as the Dockerfile's COPY LICENSE)"
  else
    log "FAIL license    /LICENSE missing or not the repository's LICENSE"; rc=1
  fi
  rm -rf "$w"
  [ "$rc" = 0 ] || die "the local operator image and the Dockerfile disagree (see above); update hack/images.sh or the Dockerfile"
  log "the local operator image agrees with the Dockerfile"
}

cmd_ids() {
  local out=${1:?usage: hack/images.sh ids OUT} t id
  need
  {
    for t in v1 v2 v3; do
      id=sha256:$(skopeo inspect --config --raw "docker-archive:$out/busybox-$t.tar" | sha256sum | cut -d' ' -f1)
      echo "$TEST_REPO/busybox:$t $id"
      if [ "$t" = v2 ]; then echo "$TEST_REPO/busybox:v2-alias $id"; fi
    done
    for t in v1 v2 v3 empty; do
      id=sha256:$(skopeo inspect --config --raw "docker-archive:$out/hot-$t.tar" | sha256sum | cut -d' ' -f1)
      echo "$TEST_REPO/hot:$t $id"
    done
  } >"$out/image-ids"
}

case ${1:-} in
  test) shift; cmd_test "$@" ;;
  ids) shift; cmd_ids "$@" ;;
  operator) shift; cmd_operator "$@" ;;
  check) shift; cmd_check "$@" ;;
  olm) shift; cmd_olm "$@" ;;
  bundle) shift; cmd_bundle "$@" ;;
  *) echo "usage: $0 test OUT | ids OUT | operator BIN OUT | olm OLM_BIN OUT | bundle DIR REF OUT | check OUT" >&2; exit 2 ;;
esac
