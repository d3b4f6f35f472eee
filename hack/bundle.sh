#!/usr/bin/env bash
# The OLM bundle (registry+v1) in bundle/ and bundle.Dockerfile, generated from the Helm chart's
# rendering and the code, so that the two cannot drift apart.
#
#   hack/bundle.sh [generate]   render the chart for OLM and write the CSV, the PodDisruptionBudget,
#                               bundle/metadata/annotations.yaml and bundle.Dockerfile
#                               (`cargo xtask bundle-generate`, crates/xtask/src/bundle; the CRD
#                               comes from `make manifests`)
#   hack/bundle.sh check        fail when those files differ from what generate would write
#   hack/bundle.sh validate     operator-sdk bundle validate --select-optional suite=operatorframework
#                               and opm render, on ./bundle (builds both tools on first use)
#   hack/bundle.sh tools        build operator-sdk and opm from Go modules into the tool cache
#   hack/bundle.sh render OUT   write a bundle (OUT/manifests, OUT/metadata, OUT/bundle.Dockerfile)
#                               for VERSION, OPERATOR_IMAGE and BUNDLE_REPLACES without touching
#                               bundle/ (the OLM e2e builds its bundle images from it)
#
# The chart is rendered with externalCerts.enabled=true (the operator runs with
# --cert-mode=files --cert-dir=/tmp/k8s-webhook-server/serving-certs, where OLM mounts the
# certificate it makes and rotates; RBAC without Secrets and without writing webhook
# configurations) and webhook.failurePolicy=Ignore for the pod webhook (OLM cannot exclude
# kube-system by namespaceSelector; the operator skips it, and must not block it when down).
#
# Environment:
#   VERSION            bundle version (default: the chart's appVersion)
#   OPERATOR_IMAGE     operator image in the CSV (default: sidecarset-operator:$VERSION, the chart's
#                      default); a release sets it, and `check` must then be given the same value
#   BUNDLE_CHANNELS    channels (default candidate); BUNDLE_DEFAULT_CHANNEL (default: the first)
#   BUNDLE_REPLACES    the version the bundle replaces (spec.replaces; default none)
#   OPERATOR_SDK_VERSION (default v1.42.3), OPM_VERSION (default v1.73.0)
#   SSO_TOOLS_CACHE    tool cache (default ~/.cache/sidecarset-operator/bin)
#   HELM               helm binary (default: hack/tools.sh helm)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CHART=charts/sidecarset-operator
BUNDLE=bundle
CRD=bundle/manifests/apps.kruise.io_sidecarsets.yaml
OPERATOR_SDK_VERSION=${OPERATOR_SDK_VERSION:-v1.42.3}
OPM_VERSION=${OPM_VERSION:-v1.73.0}
CACHE=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/bin}

log() { printf '[bundle] %s\n' "$*" >&2; }
die() { printf '[bundle] error: %s\n' "$*" >&2; exit 1; }

chart_field() { sed -n "s/^$1:[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*$/\1/p" "$CHART/Chart.yaml" | head -n1; }

VERSION=${VERSION:-$(chart_field appVersion)}
[ -n "$VERSION" ] || die "no appVersion in $CHART/Chart.yaml (or set VERSION)"
OPERATOR_IMAGE=${OPERATOR_IMAGE:-sidecarset-operator:$VERSION}
BUNDLE_CHANNELS=${BUNDLE_CHANNELS:-candidate}
BUNDLE_DEFAULT_CHANNEL=${BUNDLE_DEFAULT_CHANNEL:-${BUNDLE_CHANNELS%%,*}}

find_helm() {
  if [ -z "${HELM:-}" ]; then
    local tools
    tools=$("$REPO/hack/tools.sh" helm) || die "helm is not available and 'hack/tools.sh helm' could not build it"
    eval "$tools"
    HELM=$HELM_BIN/helm
  fi
  [ -x "$HELM" ] || HELM=$(command -v "$HELM" 2>/dev/null) || die "HELM=$HELM is not executable"
}

# xtask ARGS: the build tool (crates/xtask), built on first use.
xtask() { cargo run -q --locked -p xtask -- "$@"; }

# image_values: --set arguments for OPERATOR_IMAGE (repository:tag or repository@sha256:...)
image_values() {
  local img=$OPERATOR_IMAGE name
  if [[ $img == *@* ]]; then
    printf '%s\n' --set "image.repository=${img%@*}" --set "image.digest=${img#*@}"
    return
  fi
  name=${img##*/}
  if [[ $name == *:* ]]; then
    printf '%s\n' --set "image.repository=${img%:*}" --set "image.tag=${img##*:}"
  else
    die "OPERATOR_IMAGE=$img needs a tag or a digest"
  fi
}

# run_generator OUTDIR [--check]
run_generator() {
  local out=$1 rendered img_args
  shift
  [ -s "$CRD" ] || die "$CRD is missing: run 'make manifests' first"
  rendered=$(mktemp)
  mapfile -t img_args < <(image_values)
  # The release name and namespace only shape names; OLM installs into its own namespace. The
  # chart's `helm test` pod and its RBAC are Helm's alone (--skip-tests).
  if ! "$HELM" template sidecarset-operator "$CHART" --namespace sidecarset-system --skip-tests \
      --set externalCerts.enabled=true --set webhook.failurePolicy=Ignore "${img_args[@]}" >"$rendered"; then
    rm -f "$rendered"
    die "helm template of $CHART failed"
  fi
  local rc=0
  xtask bundle-generate --rendered "$rendered" --crd "$CRD" \
    --sample config/samples/sidecarset.yaml --base hack/bundle/csv-base.yaml --icon hack/bundle/icon.svg \
    --version "$VERSION" --channels "$BUNDLE_CHANNELS" --default-channel "$BUNDLE_DEFAULT_CHANNEL" \
    --replaces "${BUNDLE_REPLACES:-}" --out "$out" "$@" || rc=$?
  rm -f "$rendered"
  return "$rc"
}

# ---------------------------------------------------------------------------------------------
# tools: operator-sdk and opm from Go modules. `go install pkg@version` is not used because it
# asks the module proxy for the module's version list (to report deprecation), which the proxy
# here refuses; downloading the one version and building inside it asks for nothing else.

with_lock() {
  local dir=$1
  shift
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  "$@"
  exec 9>&-
}

# module_source MODULE VERSION DEST: a writable copy of the module's source
module_source() {
  local dir
  dir=$(go mod download -json "$1@$2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or ""); sys.exit(1 if d.get("Error") else 0)') \
    || die "the Go module proxy did not give $1@$2"
  [ -d "$dir" ] || die "no source directory for $1@$2"
  cp -r "$dir" "$3"
  chmod -R u+w "$3"
}

_build_operator_sdk() {
  local out=$1 w start=$SECONDS
  [ -x "$out/operator-sdk" ] && return 0
  command -v go >/dev/null || die "go is needed to build operator-sdk"
  log "building operator-sdk $OPERATOR_SDK_VERSION (first time only; a few minutes)"
  w=$(mktemp -d)
  module_source github.com/operator-framework/operator-sdk "$OPERATOR_SDK_VERSION" "$w/src"
  # The CLI links the Ansible scaffolding plugin from github.com/operator-framework/
  # ansible-operator-plugins, whose source the module proxy refuses (403). It only serves
  # `operator-sdk init --plugins ansible`; `bundle validate` does not use it. Drop it.
  python3 - "$w/src/internal/cmd/operator-sdk/cli/cli.go" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
n = len(s)
s = re.sub(r'\n\tansiblev1 "github.com/operator-framework/ansible-operator-plugins/[^"]*"', "", s)
s = re.sub(r"\n\tansibleBundle, _ := plugin\.NewBundleWithOptions\(.*?\n\t\)\n", "\n", s, flags=re.S)
s = s.replace("\n\t\t\tansibleBundle,", "")
if len(s) == n or "ansible" in s.replace("ansible-operator", ""):
    sys.exit("could not remove the Ansible plugin from " + p)
open(p, "w").write(s)
EOF
  local v=github.com/operator-framework/operator-sdk/internal/version
  (cd "$w/src" && CGO_ENABLED=0 go build -trimpath -tags containers_image_openpgp \
    -ldflags "-s -w -X $v.Version=$OPERATOR_SDK_VERSION -X $v.GitVersion=$OPERATOR_SDK_VERSION -X $v.GitCommit=module-proxy" \
    -o "$out/operator-sdk.tmp" ./cmd/operator-sdk) >&2 || { rm -rf "$w"; die "building operator-sdk failed"; }
  mv "$out/operator-sdk.tmp" "$out/operator-sdk"
  rm -rf "$w"
  log "operator-sdk $OPERATOR_SDK_VERSION built in $((SECONDS - start)) s"
}

_build_opm() {
  local out=$1 w start=$SECONDS
  [ -x "$out/opm" ] && return 0
  command -v go >/dev/null || die "go is needed to build opm"
  command -v gcc >/dev/null || die "gcc is needed to build opm (cgo, for sqlite)"
  log "building opm $OPM_VERSION (first time only; a few minutes)"
  w=$(mktemp -d)
  module_source github.com/operator-framework/operator-registry "$OPM_VERSION" "$w/src"
  (cd "$w/src" && CGO_ENABLED=1 go build -trimpath -tags json1,containers_image_openpgp \
    -ldflags "-s -w -X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$OPM_VERSION" \
    -o "$out/opm.tmp" ./cmd/opm) >&2 || { rm -rf "$w"; die "building opm failed"; }
  mv "$out/opm.tmp" "$out/opm"
  rm -rf "$w"
  log "opm $OPM_VERSION built in $((SECONDS - start)) s"
}

# on_path NAME PATTERN: NAME from PATH when `NAME version` reports the pinned version
on_path() {
  local c
  c=$(command -v "$1" 2>/dev/null) || return 1
  "$c" version 2>/dev/null | grep -qF -- "$2" || return 1
  echo "$c"
}

build_tools() {
  local found
  OPERATOR_SDK=$CACHE/operator-sdk-$OPERATOR_SDK_VERSION/operator-sdk
  OPM=$CACHE/opm-$OPM_VERSION/opm
  if [ ! -x "$OPERATOR_SDK" ] && found=$(on_path operator-sdk "\"$OPERATOR_SDK_VERSION\""); then
    log "using operator-sdk $OPERATOR_SDK_VERSION from $found"; OPERATOR_SDK=$found
  fi
  if [ ! -x "$OPM" ] && found=$(on_path opm "\"$OPM_VERSION\""); then
    log "using opm $OPM_VERSION from $found"; OPM=$found
  fi
  [ -x "$OPERATOR_SDK" ] || with_lock "$(dirname "$OPERATOR_SDK")" _build_operator_sdk "$(dirname "$OPERATOR_SDK")"
  [ -x "$OPM" ] || with_lock "$(dirname "$OPM")" _build_opm "$(dirname "$OPM")"
}

# ---------------------------------------------------------------------------------------------

cmd_validate() {
  build_tools
  local out rc=0 mk
  # The minor version OLM would install on, for the deprecated-API check.
  mk=$(sed -n 's/^  minKubeVersion: *\([0-9]*\.[0-9]*\).*/\1/p' "$BUNDLE/manifests/sidecarset-operator.clusterserviceversion.yaml")
  log "operator-sdk bundle validate ./$BUNDLE --select-optional suite=operatorframework (k8s-version=$mk; operator-sdk $OPERATOR_SDK_VERSION)"
  out=$("$OPERATOR_SDK" bundle validate "./$BUNDLE" -b none --select-optional suite=operatorframework \
    --optional-values="k8s-version=$mk" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    /' >&2
  [ "$rc" = 0 ] || die "operator-sdk bundle validate found errors"
  # Warnings are allowed only when listed here with a reason (none today). The Event kind in
  # the owned CRD's resources (csv-base.yaml) is true and also keeps the deprecated-API check
  # from mistaking the events.k8s.io RBAC rule for events.k8s.io/v1beta1.
  if grep -qiE 'level=warn|WARN' <<<"$out"; then die "operator-sdk bundle validate printed warnings; fix them or document them in hack/bundle.sh"; fi
  log "opm render ./$BUNDLE (opm $OPM_VERSION)"
  out=$("$OPM" render "./$BUNDLE" -o yaml 2>&1) || { printf '%s\n' "$out" >&2; die "opm render ./$BUNDLE failed"; }
  local summary
  summary=$(xtask opm-summary <<<"$out") || die "opm render output is not what a registry+v1 bundle gives"
  printf '    %s\n' "$summary" >&2
  log "bundle valid: operator-sdk (suite=operatorframework) without errors or warnings; opm render ok"
}

case ${1:-generate} in
  generate) find_helm; run_generator "$REPO" ;;
  check) find_helm; run_generator "$REPO" --check ;;
  validate) cmd_validate ;;
  render)
    [ -n "${2:-}" ] || die "usage: hack/bundle.sh render OUT"
    find_helm
    w=$(mktemp -d)
    run_generator "$w"
    mkdir -p "$2"
    rm -rf "$2/manifests" "$2/metadata"
    cp -r "$w/bundle/manifests" "$w/bundle/metadata" "$2/"
    cp "$w/bundle.Dockerfile" "$2/bundle.Dockerfile"
    cp "$CRD" "$2/manifests/"
    rm -rf "$w"
    log "bundle $VERSION (image $OPERATOR_IMAGE${BUNDLE_REPLACES:+, replaces $BUNDLE_REPLACES}) in $2"
    ;;
  tools) build_tools; log "operator-sdk: $OPERATOR_SDK"; log "opm: $OPM" ;;
  *) echo "usage: $0 [generate|check|validate|tools|render OUT]" >&2; exit 2 ;;
esac
