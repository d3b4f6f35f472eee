#!/usr/bin/env bash
# Builds the test tools from Go modules into a cache outside the repository, keyed by version:
#   ${SSO_TOOLS_CACHE:-~/.cache/sidecarset-operator/bin}/<tool>-<version>/<binary>
# Reuses what is cached; uses binaries from KUBEBUILDER_ASSETS or PATH when they report the pinned
# version. Prints the directory of each tool on stdout as NAME=PATH lines (for `eval`), and its
# progress on stderr.
#
#   hack/tools.sh [all|k8s|etcd|kwok|helm|kubelet|helm-docs|crane|olm|kind|kind-k8s|crictl|coredns|
#                  cargo-deny|cargo-cyclonedx|cargo-auditable|cosign|supply-chain|prometheus]...
# (`helm-docs` is asked for by hack/chart-docs.sh only; `crane` (go-containerregistry: an OCI
# registry server and a client for OCI archives) by hack/registry.sh and the release scripts;
# `olm` (OLM v0's olm-operator, catalog-operator, cpb, copy-content, and a static opm for the
# images OLM runs) by hack/olm.sh; `cargo-deny` (the dependency policy) by hack/deps.sh;
# `cargo-cyclonedx` (the SBOM), `cargo-auditable` (the dependency list in the binary) and
# `cosign` (signatures and attestations) by hack/release.sh; `supply-chain` is those four;
# `prometheus` (the server, its HTTP API without the web UI's assets) by hack/record-dashboard.py.
# The cargo tools are `cargo install --locked`ed into <tool>-v<version>/bin.)
#
# `all` is what the kwok cluster needs; `kubelet` (for the real node of hack/node.sh) is built
# only when asked for, into the same kubernetes-<version> directory (it shares the Go build cache
# with kube-apiserver; measured with an empty build cache: 191 s on 2 idle cores, about 15 min
# on 2 busy ones; with a warm cache: 43 s).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELM_DOCS_VERSION=${HELM_DOCS_VERSION:-v1.14.2}
CRANE_VERSION=${CRANE_VERSION:-v0.22.1}
OLM_VERSION=${OLM_VERSION:-v0.46.0}
# kind on a machine without a registry (hack/kind-node.sh, make e2e-kind-local)
KIND_VERSION=${KIND_VERSION:-v0.33.0}
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.3}
# The supply chain: the dependency policy, the SBOM, the binary's embedded dependency list, the
# signatures and attestations (cold builds on 2 busy cores in the comments of their functions).
CARGO_DENY_VERSION=${CARGO_DENY_VERSION:-0.20.2}
CARGO_CYCLONEDX_VERSION=${CARGO_CYCLONEDX_VERSION:-0.5.9}
CARGO_AUDITABLE_VERSION=${CARGO_AUDITABLE_VERSION:-0.7.7}
COSIGN_VERSION=${COSIGN_VERSION:-v2.6.5}
# Prometheus's Go module version: v0.316.0 is Prometheus 3.16.0 (hack/record-dashboard.py).
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}

CACHE=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecarset-operator/bin}
mkdir -p "$CACHE"

log() { printf '[tools] %s\n' "$*" >&2; }
die() { printf '[tools] error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH; Go is needed to build the test tools"

# tool_ok BINARY PATTERN: the binary exists and its --version output contains PATTERN
# (The output is read whole before grep: `grep -q` stops at the first match, and a tool that
# writes its version in several writes, like etcd, then dies of SIGPIPE, which pipefail reports
# as a failed check: a cold CI run failed on "etcd was built but does not report v3.6.16".)
tool_ok() {
  [ -x "$1" ] || return 1
  local v
  v=$("$1" --version 2>/dev/null) || return 1
  grep -qF -- "$2" <<<"$v"
}

# find_existing NAME PATTERN: a binary of that name at the pinned version in KUBEBUILDER_ASSETS/PATH
find_existing() {
  local name=$1 pat=$2 c
  for c in ${KUBEBUILDER_ASSETS:+"$KUBEBUILDER_ASSETS/$name"} "$(command -v "$name" 2>/dev/null || true)"; do
    [ -n "$c" ] && tool_ok "$c" "$pat" && { dirname "$c"; return 0; }
  done
  return 1
}

# Serialise concurrent builds of one tool (parallel CI jobs, demo + test).
with_lock() {
  local dir=$1; shift
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  "$@"
  exec 9>&-
}

# go_build_k8s OUT CMD...: k8s.io/kubernetes/cmd/CMD at K8S_VERSION into OUT, each binary
# written beside its place and renamed into it. k8s.io/kubernetes cannot be `go install`ed (its
# go.mod replaces the staging modules with ./staging paths), so it is required from a wrapper
# module that replaces them with their published versions; the version ldflags are mandatory
# (without them the binaries report a placeholder version and kubeadm picks wrong image tags).
go_build_k8s() {
  local out=$1; shift
  local sv="v0.${K8S_VERSION#v1.}" minor w c
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  w=$(mktemp -d)
  mkdir -p "$out"
  ( cd "$w"
    go mod init local/k8sbuild >/dev/null 2>&1
    local upmod m p ldf="-s -w"
    upmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    while read -r m; do
      go mod edit -replace="$m=$m@$sv"
    done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$upmod")
    # modules the proxy does not serve and no binary imports: local stubs
    for m in k8s.io/sample-cli-plugin k8s.io/sample-controller k8s.io/sample-apiserver; do
      if go mod edit -json | grep -F "\"Path\": \"$m\"" >/dev/null; then
        mkdir -p "stub/$m" && echo "module $m" >"stub/$m/go.mod" && go mod edit -replace="$m=./stub/$m"
      fi
    done
    grep -E '^godebug ' "$upmod" >>go.mod || true
    local pkgs=()
    for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
    go get "${pkgs[@]}" >&2
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldf+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
      ldf+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    for c in "$@"; do
      log "  go build $c"
      CGO_ENABLED=0 go build -mod=mod -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldf" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c"
      mv "$out/$c.tmp" "$out/$c"
    done )
  rm -rf "$w"
}

build_k8s() {
  local out=$CACHE/kubernetes-$K8S_VERSION
  if tool_ok "$out/kube-apiserver" "Kubernetes $K8S_VERSION" && tool_ok "$out/kube-controller-manager" "Kubernetes $K8S_VERSION" \
     && tool_ok "$out/kube-scheduler" "Kubernetes $K8S_VERSION"; then
    echo "K8S_BIN=$out"; return
  fi
  local existing
  if existing=$(find_existing kube-apiserver "Kubernetes $K8S_VERSION") \
     && tool_ok "$existing/kube-controller-manager" "Kubernetes $K8S_VERSION" \
     && tool_ok "$existing/kube-scheduler" "Kubernetes $K8S_VERSION"; then
    log "using kube-apiserver $K8S_VERSION from $existing"; echo "K8S_BIN=$existing"; return
  fi
  with_lock "$out" _build_k8s "$out"
  echo "K8S_BIN=$out"
}

_build_k8s() {
  local out=$1 start=$SECONDS
  tool_ok "$out/kube-apiserver" "Kubernetes $K8S_VERSION" && tool_ok "$out/kube-scheduler" "Kubernetes $K8S_VERSION" && return 0
  log "building kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION (cold: about 20-30 min on 2 cores)"
  go_build_k8s "$out" kube-apiserver kube-controller-manager kube-scheduler
  tool_ok "$out/kube-apiserver" "Kubernetes $K8S_VERSION" || die "kube-apiserver was built but does not report $K8S_VERSION"
  log "kubernetes $K8S_VERSION built in $((SECONDS - start)) s"
}

# The kubelet of the real node (hack/node.sh): same recipe, flags and cache directory as above.
build_kubelet() {
  local out=$CACHE/kubernetes-$K8S_VERSION
  if tool_ok "$out/kubelet" "Kubernetes $K8S_VERSION"; then echo "KUBELET_BIN=$out"; return; fi
  local existing
  if existing=$(find_existing kubelet "Kubernetes $K8S_VERSION"); then
    log "using kubelet $K8S_VERSION from $existing"; echo "KUBELET_BIN=$existing"; return
  fi
  with_lock "$out" _build_kubelet "$out"
  echo "KUBELET_BIN=$out"
}

_build_kubelet() {
  local out=$1 start=$SECONDS
  tool_ok "$out/kubelet" "Kubernetes $K8S_VERSION" && return 0
  log "building kubelet $K8S_VERSION (cold Go build cache: 3 min on 2 idle cores, up to 15 min on busy ones; warm: under a minute)"
  go_build_k8s "$out" kubelet
  tool_ok "$out/kubelet" "Kubernetes $K8S_VERSION" || die "kubelet was built but does not report $K8S_VERSION"
  log "kubelet $K8S_VERSION built in $((SECONDS - start)) s"
}

# The Kubernetes binaries of a kind node image (hack/kind-node.sh): kubeadm, kubelet, kubectl,
# kube-proxy and the control plane, with the recipe above (wrapper module, staging replaces,
# version ldflags: without them kubeadm reports a placeholder version and picks wrong image tags).
# Built into a temporary directory, then renamed into place.
KIND_K8S_CMDS="kubeadm kubelet kubectl kube-proxy kube-apiserver kube-controller-manager kube-scheduler"
kind_k8s_ok() {
  local out=$1 c
  for c in $KIND_K8S_CMDS; do
    case $c in
      kubeadm) [ -x "$out/$c" ] && [ "$("$out/$c" version -o short 2>/dev/null)" = "$K8S_VERSION" ] || return 1 ;;
      kubectl) [ -x "$out/$c" ] && [[ $("$out/$c" version --client 2>/dev/null) == *"$K8S_VERSION"* ]] || return 1 ;;
      *) tool_ok "$out/$c" "Kubernetes $K8S_VERSION" || return 1 ;;
    esac
  done
}

build_kind_k8s() {
  local out=$CACHE/kind-k8s-$K8S_VERSION
  kind_k8s_ok "$out" || with_lock "$out.lock.d" _build_kind_k8s "$out"
  echo "KIND_K8S_BIN=$out"
}

_build_kind_k8s() {
  local out=$1 start=$SECONDS
  kind_k8s_ok "$out" && return 0
  log "building $KIND_K8S_CMDS $K8S_VERSION (cold: 30-60 min on 2 busy cores)"
  local w
  w=$(mktemp -d)
  # shellcheck disable=SC2086 # a list of commands on purpose
  go_build_k8s "$w/bin" $KIND_K8S_CMDS
  kind_k8s_ok "$w/bin" || die "the kind node's Kubernetes binaries were built but do not report $K8S_VERSION"
  rm -rf "$out.old"; [ ! -e "$out" ] || mv "$out" "$out.old"
  mv "$w/bin" "$out"; rm -rf "$w" "$out.old"
  log "kind node binaries $K8S_VERSION built in $((SECONDS - start)) s"
}

build_etcd() {
  local out=$CACHE/etcd-$ETCD_VERSION
  if tool_ok "$out/etcd" "etcd Version: ${ETCD_VERSION#v}"; then echo "ETCD_BIN=$out"; return; fi
  local existing
  if existing=$(find_existing etcd "etcd Version: ${ETCD_VERSION#v}"); then
    log "using etcd $ETCD_VERSION from $existing"; echo "ETCD_BIN=$existing"; return
  fi
  with_lock "$out" _build_etcd "$out"
  echo "ETCD_BIN=$out"
}

_build_etcd() {
  local out=$1 start=$SECONDS w
  tool_ok "$out/etcd" "etcd Version: ${ETCD_VERSION#v}" && return 0
  log "building etcd $ETCD_VERSION"
  w=$(mktemp -d)
  ( cd "$w"
    go mod init local/etcdbuild >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
    CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$out/etcd.tmp" "$out/etcd" )
  rm -rf "$w"
  tool_ok "$out/etcd" "etcd Version: ${ETCD_VERSION#v}" || die "etcd was built but does not report $ETCD_VERSION"
  log "etcd $ETCD_VERSION built in $((SECONDS - start)) s"
}

build_kwok() {
  local out=$CACHE/kwok-$KWOK_VERSION
  if [ -x "$out/kwok" ] && [ -x "$out/kwokctl" ]; then echo "KWOK_BIN=$out"; return; fi
  with_lock "$out" _build_kwok "$out"
  echo "KWOK_BIN=$out"
}

_build_kwok() {
  local out=$1 start=$SECONDS
  [ -x "$out/kwok" ] && [ -x "$out/kwokctl" ] && return 0
  log "building kwok and kwokctl $KWOK_VERSION"
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >&2
  log "kwok $KWOK_VERSION built in $((SECONDS - start)) s"
}

build_helm() {
  local out=$CACHE/helm-$HELM_VERSION
  if [ -x "$out/helm" ] && "$out/helm" version --short 2>/dev/null | grep -qF "$HELM_VERSION"; then echo "HELM_BIN=$out"; return; fi
  with_lock "$out" _build_helm "$out"
  echo "HELM_BIN=$out"
}

_build_helm() {
  local out=$1 start=$SECONDS minor
  [ -x "$out/helm" ] && "$out/helm" version --short 2>/dev/null | grep -qF "$HELM_VERSION" && return 0
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  log "building helm $HELM_VERSION"
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  log "helm $HELM_VERSION built in $((SECONDS - start)) s"
}

# go_tool VAR NAME VERSION MODULE: a tool that `go install MODULE@VERSION` builds as one binary
# NAME, cached in NAME-VERSION; prints VAR=DIR.
go_tool() {
  local var=$1 name=$2 version=$3 module=$4 out=$CACHE/$2-$3
  if [ ! -x "$out/$name" ]; then with_lock "$out" _go_tool "$out" "$name" "$version" "$module"; fi
  echo "$var=$out"
}

_go_tool() {
  local out=$1 name=$2 version=$3 module=$4 start=$SECONDS
  [ -x "$out/$name" ] && return 0
  log "building $name $version"
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$module@$version" >&2
  log "$name $version built in $((SECONDS - start)) s"
}

# helm-docs writes the chart's README from values.yaml (hack/chart-docs.sh).
build_helm_docs() { go_tool HELM_DOCS_BIN helm-docs "$HELM_DOCS_VERSION" github.com/norwoodj/helm-docs/cmd/helm-docs; }

# crane: `crane registry serve` is the registry on the machine (hack/registry.sh); `crane push`,
# `crane digest` and `crane copy` move OCI archives in and out of it.
build_crane() { go_tool CRANE_BIN crane "$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane; }

# OLM v0 (github.com/operator-framework/operator-lifecycle-manager): olm (olm-operator), catalog
# (catalog-operator), cpb and copy-content (the helpers OLM's unpack Jobs and catalog pods copy out
# of its util image), and opm (operator-registry) built in OLM's own module graph, which pins the
# operator-registry version OLM was released with and shares its dependencies' build cache.
# All static (CGO_ENABLED=0; opm's SQLite index commands then fail, file-based catalogs do not
# use them), so they run inside images built from scratch. The deploy/ directory (OLM's CRDs) is
# copied next to them. `go install pkg@version` is not used: it asks the module proxy for the
# version list, which the proxy here refuses; the one version is downloaded and built inside.
build_olm() {
  local out=$CACHE/olm-$OLM_VERSION
  if [ -x "$out/olm" ] && [ -x "$out/catalog" ] && [ -x "$out/opm" ] && [ -x "$out/cpb" ] && [ -x "$out/copy-content" ] \
     && [ -d "$out/deploy/chart/crds" ]; then echo "OLM_BIN=$out"; return; fi
  with_lock "$out" _build_olm "$out"
  echo "OLM_BIN=$out"
}

_build_olm() {
  local out=$1 start=$SECONDS w dir
  [ -x "$out/olm" ] && [ -x "$out/catalog" ] && [ -x "$out/opm" ] && [ -x "$out/cpb" ] && [ -x "$out/copy-content" ] \
    && [ -d "$out/deploy/chart/crds" ] && return 0
  log "building OLM $OLM_VERSION (olm, catalog, cpb, copy-content, opm; cold: about 10 min on 2 cores)"
  local mod=github.com/operator-framework/operator-lifecycle-manager
  dir=$(go mod download -json "$mod@$OLM_VERSION" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or ""); sys.exit(1 if d.get("Error") else 0)') \
    || die "the Go module proxy did not give $mod@$OLM_VERSION"
  w=$(mktemp -d)
  cp -r "$dir" "$w/src"
  chmod -R u+w "$w/src"
  ( cd "$w/src"
    local ldf="-s -w -X $mod/pkg/version.OLMVersion=${OLM_VERSION#v} -X $mod/pkg/version.GitCommit=module-proxy"
    CGO_ENABLED=0 go build -mod=mod -trimpath -tags json1,containers_image_openpgp -ldflags "$ldf" -o "$w/bin/" \
      ./cmd/olm ./cmd/catalog ./cmd/copy-content ./util/cpb github.com/operator-framework/operator-registry/cmd/opm >&2 )
  mkdir -p "$out"
  rm -rf "$out/deploy"
  cp -r "$w/src/deploy" "$out/deploy"
  local b
  for b in copy-content cpb opm catalog olm; do mv "$w/bin/$b" "$out/$b"; done
  rm -rf "$w"
  log "OLM $OLM_VERSION built in $((SECONDS - start)) s"
}

build_kind() { go_tool KIND_BIN kind "$KIND_VERSION" sigs.k8s.io/kind; }
build_crictl() { go_tool CRICTL_BIN crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl; }
build_coredns() { go_tool COREDNS_BIN coredns "$COREDNS_VERSION" github.com/coredns/coredns; }

# cargo_tool VAR CRATE VERSION BINARY [cargo install flags...]: `cargo install --locked` of
# CRATE at VERSION into CRATE-vVERSION (its bin/ holds BINARY); prints VAR=<that bin dir>.
cargo_tool() {
  local var=$1 crate=$2 version=$3 binary=$4 out=$CACHE/$2-v$3
  shift 4
  if ! cargo_tool_ok "$out" "$crate" "$version" "$binary"; then with_lock "$out" _cargo_tool "$out" "$crate" "$version" "$binary" "$@"; fi
  echo "$var=$out/bin"
}

# cargo_tool_ok ROOT CRATE VERSION BINARY: cargo install's record in ROOT says CRATE VERSION and
# the binary is there (cargo subcommands such as cargo-auditable do not print their own version).
cargo_tool_ok() {
  [ -x "$1/bin/$4" ] && [ -s "$1/.crates.toml" ] && grep -qF "\"$2 $3 (registry+" "$1/.crates.toml"
}

_cargo_tool() {
  local out=$1 crate=$2 version=$3 binary=$4 start=$SECONDS
  shift 4
  cargo_tool_ok "$out" "$crate" "$version" "$binary" && return 0
  command -v cargo >/dev/null || die "cargo is not on PATH; it builds $crate"
  log "building $crate $version (cargo install --locked)"
  # Test tools, built once per machine: their own release profiles ask for a fat LTO in one
  # codegen unit (cargo-deny: most of a cold run's 17 min build of it), which buys them nothing
  # here; cargo's profile settings from the environment take precedence over the crate's.
  CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    cargo install --quiet --locked "$crate" --version "$version" --root "$out" "$@" >&2
  cargo_tool_ok "$out" "$crate" "$version" "$binary" || die "$crate was built but $out does not hold $binary $version"
  log "$crate $version built in $((SECONDS - start)) s"
}

# cargo-deny: the dependency policy of `make check` (hack/deps.sh; deny.toml).
build_cargo_deny() { cargo_tool CARGO_DENY_BIN cargo-deny "$CARGO_DENY_VERSION" cargo-deny; }
# cargo-cyclonedx: the CycloneDX SBOM of the operator from the Cargo graph (hack/release.sh).
build_cargo_cyclonedx() { cargo_tool CARGO_CYCLONEDX_BIN cargo-cyclonedx "$CARGO_CYCLONEDX_VERSION" cargo-cyclonedx; }
# cargo-auditable: the release binary carries its dependency list (`cargo auditable build`).
build_cargo_auditable() { cargo_tool CARGO_AUDITABLE_BIN cargo-auditable "$CARGO_AUDITABLE_VERSION" cargo-auditable; }

# cosign (sigstore, v2: key-based signing without a transparency log, --tlog-upload=false):
# signs the image and the OCI chart and attaches the SBOM and provenance attestations
# (hack/release.sh). Its version is stamped the way its own release build does.
build_cosign() {
  local out=$CACHE/cosign-$COSIGN_VERSION
  if ! tool_ok_cosign "$out/cosign"; then with_lock "$out" _build_cosign "$out"; fi
  echo "COSIGN_BIN=$out"
}
tool_ok_cosign() { [ -x "$1" ] && "$1" version 2>/dev/null | grep -qE "GitVersion: +$COSIGN_VERSION\$"; }
_build_cosign() {
  local out=$1 start=$SECONDS
  tool_ok_cosign "$out/cosign" && return 0
  log "building cosign $COSIGN_VERSION"
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION" >&2
  tool_ok_cosign "$out/cosign" || die "cosign was built but does not report $COSIGN_VERSION"
  log "cosign $COSIGN_VERSION built in $((SECONDS - start)) s"
}

# Prometheus (hack/record-dashboard.py scrapes the operator and evaluates the dashboard's queries
# with it): cmd/prometheus of the Go module at PROMETHEUS_VERSION (v0.3MM.P is Prometheus 3.MM.P),
# stamped with that release's version. Built with remove_all_sd (static, file and HTTP service
# discovery only: the cloud and Kubernetes discovery plugins are most of the build) and without
# builtinassets (the web UI is not embedded; the HTTP API is all the script uses).
prometheus_release() { local m=${PROMETHEUS_VERSION#v0.}; echo "${m:0:1}.${m:1:2}.${m#*.}"; }
tool_ok_prometheus() { tool_ok "$1" "prometheus, version $(prometheus_release) "; }
build_prometheus() {
  local out=$CACHE/prometheus-$PROMETHEUS_VERSION
  if ! tool_ok_prometheus "$out/prometheus"; then with_lock "$out" _build_prometheus "$out"; fi
  echo "PROMETHEUS_BIN=$out"
}
_build_prometheus() {
  local out=$1 start=$SECONDS v=github.com/prometheus/common/version
  tool_ok_prometheus "$out/prometheus" && return 0
  log "building prometheus $PROMETHEUS_VERSION (Prometheus $(prometheus_release))"
  GOBIN="$out" GOWORK=off CGO_ENABLED=0 go install -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X $v.Version=$(prometheus_release) -X $v.Revision=$PROMETHEUS_VERSION -X $v.Branch=module-proxy" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" >&2
  tool_ok_prometheus "$out/prometheus" || die "prometheus was built but does not report $(prometheus_release)"
  log "prometheus $PROMETHEUS_VERSION built in $((SECONDS - start)) s"
}

targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=(all)
for t in "${targets[@]}"; do
  case $t in
    all) build_etcd; build_kwok; build_helm; build_k8s ;;
    k8s) build_k8s ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    helm) build_helm ;;
    kubelet) build_kubelet ;;
    helm-docs) build_helm_docs ;;
    crane) build_crane ;;
    olm) build_olm ;;
    kind) build_kind ;;
    kind-k8s) build_kind_k8s ;;
    crictl) build_crictl ;;
    coredns) build_coredns ;;
    cargo-deny) build_cargo_deny ;;
    cargo-cyclonedx) build_cargo_cyclonedx ;;
    cargo-auditable) build_cargo_auditable ;;
    cosign) build_cosign ;;
    supply-chain) build_cargo_deny; build_cargo_cyclonedx; build_cargo_auditable; build_cosign ;;
    prometheus) build_prometheus ;;
    *) die "unknown tool '$t' (expected all, k8s, etcd, kwok, helm, kubelet, helm-docs, crane, olm, kind, kind-k8s, crictl, coredns, cargo-deny, cargo-cyclonedx, cargo-auditable, cosign, supply-chain or prometheus)" ;;
  esac
done
