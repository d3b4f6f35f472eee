#!/usr/bin/env bash
# Proves the Helm chart (charts/sidecarset-operator) against a real API server, the one of the
# current KUBECONFIG (the local kwok cluster in `make test`):
#
#   1. lint      helm lint --strict with the default values and with every ci/*.yaml; the values
#                schema rejects a bad value; no rendering ever contains caBundle; tracing: no
#                OTEL_* variable by default, the OTLP endpoint, protocol, sampler, resource
#                attributes and headers Secret of ci/tracing-values.yaml otherwise, the CA and
#                client certificate files, their Secret volumes and mounts of
#                ci/tracing-tls-values.yaml (and refusals of tracing.tls without https); the Grafana
#                dashboard ConfigMap and PrometheusRule: off by default, rendered and valid with
#                ci/monitoring-values.yaml, refused without metrics.enabled
#   2. dry-run   helm template of each values file, then a server-side dry run of the result (and of
#                the CRD); kinds whose CRDs the cluster does not serve (cert-manager's Certificate
#                and Issuer, prometheus-operator's ServiceMonitor) are left out and listed
#   3. install   helm install into $SSO_CHART_NAMESPACE (Pod Security "restricted" enforced), then
#                checks what it created; admission probes (server-side dry runs) show that the pod
#                webhook is called for ordinary pods and skipped for the operator's namespace and
#                its own pods
#   4. rbac      a token for the chart's ServiceAccount (TokenRequest API) in a kubeconfig; as that
#                identity: everything the operator needs is allowed, the rest is not; writing
#                caBundle by server-side apply works (field manager sidecarset-operator, as the
#                operator does); removing the ClusterRole's namespaces rule denies listing
#                namespaces (and putting it back allows it again)
#   5. upgrade   helm upgrade with other values keeps the caBundle the operator wrote and applies
#                the new values; the documented CRD upgrade (kubectl apply --server-side
#                --force-conflicts -f crds/) works
#   6. uninstall removes everything but the CRD
#   7. release   a binary built with cargo auditable (with SSO_CHART_TEST_REPRODUCE=1:
#                `hack/release.sh reproduce`, the release binary of HEAD built twice in two
#                directories, one binary and one image digest); then `hack/release.sh` (what
#                `make release` runs) from that binary, signed with a throwaway cosign key and PGP
#                key (hack/supply-chain.sh test-keys), into $SSO_WORK/chart-test/release,
#                pushing to the registry on this machine (hack/registry.sh, crane): its own verify
#                (SHA256SUMS, the Krew manifest's sha256 against its archive, the image archive's
#                digest as crane computes it in the registry, the chart's digest there, the cosign
#                signatures of image and chart, the SBOM and provenance attestations, the Helm
#                provenance file, the binary's embedded dependency list); another public key, an
#                unsigned image, a changed chart archive and a changed SBOM fail verification; then
#                `helm install oci://…/sidecarset-operator --version VERSION --verify` and by
#                digest (oci://…@sha256:…) install the release and its objects appear; a wrong
#                digest is refused; a tampered Krew manifest and a dirty working tree are refused
#                (SSO_CHART_TEST_RELEASE=0 leaves this step out; BIN=<a cargo auditable release
#                binary> leaves out the two builds)
#
# Pods do not really run on kwok (its fake kubelet marks them Running/Ready), so the operator
# itself is not exercised here; e2e does that. Works with Helm 3 (three-way merge) and Helm 4
# (server-side apply): HELM=<helm 4 binary> hack/chart-test.sh.
#
# Usage:
#   hack/chart-test.sh                   run the checks against the current KUBECONFIG
#   hack/chart-test.sh lint              step 1 only (no cluster needed)
#   hack/chart-test.sh release           step 7 only, against the current KUBECONFIG
#   hack/chart-test.sh --with-cluster    start a local cluster first (hack/cluster.sh, name
#                                        $SSO_CLUSTER_NAME, default sidecarset-chart-test) and
#                                        delete it afterwards
#   hack/chart-test.sh sa-kubeconfig OUT [DURATION]
#                                        write a kubeconfig that authenticates as the ServiceAccount
#                                        of an installed release (token from the TokenRequest API,
#                                        default lifetime 12h), e.g. to run the operator process
#                                        with exactly the chart's RBAC
#
# Environment:
#   KUBECONFIG                the cluster (required unless --with-cluster)
#   SSO_CHART_RELEASE         release name (default sidecarset-operator)
#   SSO_CHART_NAMESPACE       release namespace (default sidecarset-system)
#   SSO_CHART_TIMEOUT         timeout of each wait in seconds (default 180)
#   SSO_WORK                  scratch directory (default <repo>/.local); files go to $SSO_WORK/chart-test
#   HELM                      helm binary (default: built by hack/tools.sh helm)
#   KUBECTL                   kubectl binary (default: $SSO_WORK/bin/kubectl, else kubectl on PATH)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART=$REPO/charts/sidecarset-operator
RELEASE=${SSO_CHART_RELEASE:-sidecarset-operator}
NS=${SSO_CHART_NAMESPACE:-sidecarset-system}
TIMEOUT=${SSO_CHART_TIMEOUT:-180}
WORK=${SSO_WORK:-$REPO/.local}
OUT=$WORK/chart-test
CRD_NAME=sidecarsets.apps.kruise.io
FIELD_MANAGER=sidecarset-operator
# The operator's field manager for the pod webhook's match condition.
MATCH_CONDITIONS_MANAGER=sidecarset-operator-match-conditions

log() { printf '[chart-test] %s\n' "$*" >&2; }
die() { printf '\n[chart-test] FAILED: %s\n\n' "$*" >&2; exit 1; }
# A command that ends the script through set -e says where (never a silent stop).
trap 'printf "\n[chart-test] FAILED: line %s exited %s: %s\n\n" "$LINENO" "$?" "$BASH_COMMAND" >&2' ERR
SECTIONS=()
declare -A SECTION_CHECKS=()
CURRENT=
section() {
  CURRENT=$1
  SECTIONS+=("$1")
  SECTION_CHECKS[$1]=0
  printf '\n[chart-test] ==== %s\n' "$1" >&2
}

PASSED=()
pass() {
  PASSED+=("$1")
  [ -z "$CURRENT" ] || SECTION_CHECKS[$CURRENT]=$((SECTION_CHECKS[$CURRENT] + 1))
  printf '[chart-test]   ok  %s\n' "$1" >&2
}

case $TIMEOUT in '' | *[!0-9]*) die "SSO_CHART_TIMEOUT='$TIMEOUT' must be a number of seconds" ;; esac

# ---------------------------------------------------------------------------------------------
# tools

find_tools() {
  if [ -z "${HELM:-}" ] && [ "${NEED_HELM:-1}" = 1 ]; then
    local tools
    tools=$("$REPO/hack/tools.sh" helm) || die "helm is not available and 'hack/tools.sh helm' could not build it"
    eval "$tools"
    HELM=$HELM_BIN/helm
  fi
  if [ "${NEED_HELM:-1}" = 1 ]; then
    [ -x "$HELM" ] || HELM=$(command -v "$HELM" 2>/dev/null) || die "HELM=$HELM is not executable"
  fi
  if [ -z "${KUBECTL:-}" ] && [ "${NEED_KUBECTL:-1}" = 1 ]; then
    if [ -x "$WORK/bin/kubectl" ]; then KUBECTL=$WORK/bin/kubectl
    else KUBECTL=$(command -v kubectl 2>/dev/null) || die "kubectl is not on PATH (or set KUBECTL)"; fi
  fi
  command -v python3 >/dev/null || die "python3 is needed (YAML filtering and JSON checks)"
  python3 -c 'import yaml' 2>/dev/null || die "python3 needs PyYAML (apt-get install python3-yaml)"
  command -v openssl >/dev/null || die "openssl is needed (a CA certificate for the simulated caBundle)"
  # kubectl's discovery cache would otherwise go to ~/.kube/cache.
  export KUBECACHEDIR=${KUBECACHEDIR:-$WORK/kube-cache}
}

k() { "$KUBECTL" --request-timeout=20s "$@"; }
# kubectl as the chart's ServiceAccount.
ksa() { "$KUBECTL" --kubeconfig="$SA_KUBECONFIG" --request-timeout=20s "$@"; }

# wait_until SECONDS DESCRIPTION COMMAND...
wait_until() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}

# jpath KIND NAME JSONPATH [-n NS]
jpath() {
  local kind=$1 name=$2 path=$3
  shift 3
  k get "$kind" "$name" "$@" -o "jsonpath=$path"
}

# expect_eq DESCRIPTION ACTUAL EXPECTED
expect_eq() {
  [ "$2" = "$3" ] || die "$1: expected '$3', got '$2'"
  pass "$1"
}

# ---------------------------------------------------------------------------------------------
# sa-kubeconfig

# write_sa_kubeconfig OUT DURATION: a kubeconfig for the release's ServiceAccount, against the
# current cluster, with a token from the TokenRequest API.
write_sa_kubeconfig() {
  local out=$1 duration=$2 sa server ca_data ca_file token ctx cluster
  sa=$(k -n "$NS" get deployment -l "app.kubernetes.io/instance=$RELEASE" \
    -o jsonpath='{.items[0].spec.template.spec.serviceAccountName}' 2>/dev/null) || true
  [ -n "$sa" ] || die "no Deployment of release '$RELEASE' in namespace '$NS' (is the chart installed? set SSO_CHART_RELEASE/SSO_CHART_NAMESPACE)"
  ctx=$(k config current-context)
  cluster=$(k config view --minify -o jsonpath='{.contexts[0].context.cluster}')
  server=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca_data=$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  ca_file=$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  token=$(k -n "$NS" create token "$sa" --duration="$duration") || die "TokenRequest for serviceaccount $NS/$sa failed"
  [ -n "$server" ] || die "no server in the current context '$ctx'"
  mkdir -p "$(dirname "$out")"
  rm -f "$out"
  (umask 077 && : >"$out")
  local kc=("$KUBECTL" --kubeconfig="$out")
  if [ -n "$ca_data" ]; then
    printf '%s' "$ca_data" | base64 -d >"$out.ca"
    "${kc[@]}" config set-cluster "$cluster" --server="$server" --certificate-authority="$out.ca" --embed-certs >/dev/null
    rm -f "$out.ca"
  elif [ -n "$ca_file" ]; then
    "${kc[@]}" config set-cluster "$cluster" --server="$server" --certificate-authority="$ca_file" --embed-certs >/dev/null
  else
    "${kc[@]}" config set-cluster "$cluster" --server="$server" >/dev/null
  fi
  "${kc[@]}" config set-credentials "system:serviceaccount:$NS:$sa" --token="$token" >/dev/null
  "${kc[@]}" config set-context "$sa@$cluster" --cluster="$cluster" --user="system:serviceaccount:$NS:$sa" --namespace="$NS" >/dev/null
  "${kc[@]}" config use-context "$sa@$cluster" >/dev/null
  SA_NAME=$sa
}

if [ "${1:-}" = sa-kubeconfig ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 sa-kubeconfig OUT [DURATION]" >&2; exit 2; }
  [ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set"
  NEED_HELM=0 find_tools
  write_sa_kubeconfig "$2" "${3:-12h}"
  log "wrote $2: serviceaccount $NS/$SA_NAME (token valid ${3:-12h})"
  exit 0
fi

VALUES_FILES=("")
for f in "$CHART"/ci/*.yaml; do [ -e "$f" ] && VALUES_FILES+=("$f"); done
label_of() { if [ -z "$1" ]; then echo "default values"; else echo "ci/$(basename "$1")"; fi; }

# render FILE [VALUES]: helm template into FILE
render() {
  local out=$1 f=${2:-}
  local args=(template "$RELEASE" "$CHART" -n "$NS")
  [ -z "$f" ] || args+=(-f "$f")
  "$HELM" "${args[@]}" >"$out" || die "helm template failed with $(label_of "$f")"
}

# env_names RENDERED: the env names of the operator container of the Deployment in RENDERED, in
# order, space-separated.
env_names() {
  python3 -c '
import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
print(" ".join(e["name"] for e in d["spec"]["template"]["spec"]["containers"][0].get("env") or []))' "$1"
}

# env_of RENDERED NAME: how the operator container of the Deployment in RENDERED sets NAME: its
# value, fieldRef:PATH, secretKeyRef:SECRET/KEY, or <unset>. Prints <error: ...> when NAME is set
# twice or its value refers to a $(VAR) that is not set before it (Kubernetes expands only those).
env_of() {
  python3 -c '
import json, re, sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
env = d["spec"]["template"]["spec"]["containers"][0].get("env") or []
names = [e["name"] for e in env]
want = sys.argv[2]
if names.count(want) > 1:
    print("<error: %s is set %d times>" % (want, names.count(want)))
elif want not in names:
    print("<unset>")
else:
    i = names.index(want)
    e = env[i]
    vf = e.get("valueFrom") or {}
    late = [r for r in re.findall(r"[$][(]([A-Za-z_][A-Za-z0-9_]*)[)]", e.get("value") or "") if r not in names[:i]]
    if late:
        print("<error: %s refers to the variable %s, not set before it>" % (want, late[0]))
    elif "value" in e:
        print(e["value"])
    elif "fieldRef" in vf:
        print("fieldRef:" + vf["fieldRef"]["fieldPath"])
    elif "secretKeyRef" in vf:
        print("secretKeyRef:%s/%s" % (vf["secretKeyRef"]["name"], vf["secretKeyRef"]["key"]))
    else:
        print("valueFrom:" + json.dumps(vf, sort_keys=True))' "$1" "$2"
}

# volume_names RENDERED: the volume names of the Deployment's pod in RENDERED and the volumeMount
# names of its operator container, as "VOLUMES / MOUNTS" (each space-separated, in order).
volume_names() {
  python3 -c '
import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
spec = d["spec"]["template"]["spec"]
print(" ".join(v["name"] for v in spec.get("volumes") or []), "/",
      " ".join(m["name"] for m in spec["containers"][0].get("volumeMounts") or []))' "$1"
}

# volume_of RENDERED NAME: the Secret volume NAME of the Deployment's pod in RENDERED and where
# the operator container mounts it: "secret=SECRET items=KEY:PATH,... mode=MODE mount=PATH:ro|rw"
# (MODE in octal), <unset>, or <error: ...> (not a Secret volume, set or mounted twice, not
# mounted).
volume_of() {
  python3 -c '
import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
spec = d["spec"]["template"]["spec"]
want = sys.argv[2]
vols = [v for v in spec.get("volumes") or [] if v["name"] == want]
mounts = [m for m in spec["containers"][0].get("volumeMounts") or [] if m["name"] == want]
if not vols and not mounts:
    print("<unset>")
elif len(vols) != 1 or len(mounts) != 1:
    print("<error: %s: %d volumes, %d mounts>" % (want, len(vols), len(mounts)))
elif "secret" not in vols[0]:
    print("<error: %s is not a Secret volume>" % want)
else:
    s, m = vols[0]["secret"], mounts[0]
    mode = s.get("defaultMode")
    print("secret=%s items=%s mode=%s mount=%s:%s" % (
        s.get("secretName"), ",".join("%s:%s" % (i["key"], i["path"]) for i in s.get("items") or []),
        "<none>" if mode is None else "%04o" % mode, m["mountPath"], "ro" if m.get("readOnly") else "rw"))' "$1" "$2"
}

# Step 1, offline: lint, the schema, and no caBundle in any rendering.
# The chart's deployment knobs (ci/extras-values.yaml, webhook.hostNetwork) reach the objects, the
# defaults keep the Linux node selector and the Deployment's strategy, and NOTES.txt warns about a
# bare default image and --reuse-values.
extras_phase() {
  local bad
  bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" -f "$CHART/ci/extras-values.yaml" \
    --set webhook.hostNetwork=true --set webhook.port=10250 | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
by = {}
for d in docs: by.setdefault(d["kind"], []).append(d)
bad = []
dep = by["Deployment"][0]; spec = dep["spec"]; pod = spec["template"]["spec"]; c = pod["containers"][0]
if c["image"] != "mirror.example.internal:5000/sidecarset-operator:" + dep["metadata"]["labels"]["app.kubernetes.io/version"]: bad.append("image " + c["image"])
if (pod.get("hostNetwork"), pod.get("dnsPolicy")) != (True, "ClusterFirstWithHostNet"): bad.append("hostNetwork/dnsPolicy")
if c["ports"][0]["containerPort"] != 10250 or "--listen=0.0.0.0:10250" not in c["args"]: bad.append("webhook.port")
if spec["revisionHistoryLimit"] != 2 or spec["strategy"] != {"type": "Recreate"}: bad.append("strategy/revisionHistoryLimit")
if pod.get("nodeSelector", {}).get("kubernetes.io/os") != "linux": bad.append("nodeSelector")
if {"name": "extra-ca", "configMap": {"name": "extra-ca"}} not in pod["volumes"]: bad.append("extraVolumes")
if not any(m["name"] == "extra-ca" and m["mountPath"] == "/etc/extra-ca" for m in c["volumeMounts"]): bad.append("extraVolumeMounts")
cms = {d["metadata"]["name"]: d["metadata"] for d in by.get("ConfigMap", [])}
if cms.get("extra-ca", {}).get("namespace") != "'"$NS"'" or "'"$RELEASE"'-extra-string" not in cms: bad.append("extraObjects " + str(sorted(cms)))
for k in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
    if by[k][0]["metadata"]["labels"].get("team") != "platform": bad.append(k + " labels")
ep = by["ServiceMonitor"][0]["spec"]["endpoints"][0]
if ep.get("relabelings", [{}])[0].get("targetLabel") != "cluster" or ep.get("metricRelabelings", [{}])[0].get("action") != "drop": bad.append("ServiceMonitor relabelings")
print(" ".join(bad))')
  [ -z "$bad" ] || die "ci/extras-values.yaml (+ webhook.hostNetwork): not rendered as set: $bad"
  bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" | python3 -c '
import sys, yaml
dep = [d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Deployment"][0]
spec = dep["spec"]; pod = spec["template"]["spec"]
bad = []
if pod.get("nodeSelector") != {"kubernetes.io/os": "linux"}: bad.append("nodeSelector")
if "hostNetwork" in pod or "dnsPolicy" in pod: bad.append("hostNetwork/dnsPolicy set")
if spec["revisionHistoryLimit"] != 5 or spec["strategy"]["rollingUpdate"] != {"maxUnavailable": 0, "maxSurge": 1}: bad.append("strategy")
print(" ".join(bad))')
  [ -z "$bad" ] || die "default values render $bad"
  pass "deployment knobs (registry override, hostNetwork/dnsPolicy/port, strategy, history, extraVolumes/extraObjects, webhook labels, ServiceMonitor relabelings) rendered as set; defaults: a Linux nodeSelector, no hostNetwork"

  # `helm test`: a hook pod running check against this release, with its own RBAC; none with
  # tests.enabled=false.
  bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" | python3 -c '
import sys, yaml
hooks = [d for d in yaml.safe_load_all(sys.stdin) if d and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
kinds = sorted(d["kind"] for d in hooks)
bad = [] if kinds == ["ClusterRole", "ClusterRoleBinding", "Pod", "Role", "RoleBinding", "ServiceAccount"] else ["kinds " + str(kinds)]
pod = [d for d in hooks if d["kind"] == "Pod"]
if pod and pod[0]["spec"]["containers"][0]["args"][:2] != ["check", "--operator-namespace='"$NS"'"]: bad.append("args")
print(" ".join(bad))')
  [ -z "$bad" ] || die "helm test hook: $bad"
  [ "$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tests.enabled=false | grep -c 'helm.sh/hook": test\|helm.sh/hook: test')" = 0 ] \
    || die "tests.enabled=false still renders the helm test hook"
  pass "helm test hook: a pod running check with its own RBAC (none with tests.enabled=false)"

  # Every alert links its section of the docs site's runbooks, and that section exists.
  bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" -f "$CHART/ci/monitoring-values.yaml" \
    --set metrics.prometheusRule.runbookBaseURL=https://docs.example.internal/sso/ | python3 -c '
import re, sys, yaml
heads = {m.lower() for m in re.findall(r"^## (\w+)$", open(sys.argv[1]).read(), re.M)}
bad = []
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] == "PrometheusRule":
        for r in d["spec"]["groups"][0]["rules"]:
            a = r["alert"].lower()
            if r["annotations"].get("runbook_url") != "https://docs.example.internal/sso/operate/alerts.html#" + a: bad.append(r["alert"] + " runbook_url")
            if a not in heads: bad.append(r["alert"] + " has no section in docs/src/operate/alerts.md")
print(" ".join(bad))' "$REPO/docs/src/operate/alerts.md")
  [ -z "$bad" ] || die "alert runbooks: $bad"
  pass "every alert links its section of docs/src/operate/alerts.md (metrics.prometheusRule.runbookBaseURL)"

  # NOTES.txt, rendered through a copy of the chart where it is a named template.
  local tmp notes
  tmp=$(mktemp -d)
  cp -r "$CHART" "$tmp/chart"
  { echo '{{- define "test.notes" }}'; cat "$tmp/chart/templates/NOTES.txt"; echo '{{- end }}'; } >"$tmp/chart/templates/_notes.tpl"
  rm "$tmp/chart/templates/NOTES.txt"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "test.notes" . | toJson }}\n' >"$tmp/chart/templates/zz-notes.yaml"
  notes() { "$HELM" template "$RELEASE" "$tmp/chart" -n "$NS" --show-only templates/zz-notes.yaml "$@" \
    | python3 -c 'import sys, yaml; print(yaml.safe_load(sys.stdin)["data"]["notes"])'; }
  notes=$(notes)
  grep -q 'WARNING: image.repository is still the bare default' <<<"$notes" || { rm -rf "$tmp"; die "NOTES.txt does not warn about the bare default image"; }
  grep -q 'not --reuse-values' <<<"$notes" || { rm -rf "$tmp"; die "NOTES.txt says nothing about --reuse-values"; }
  grep -q 'sidecarset-operator crd | kubectl apply' <<<"$notes" || { rm -rf "$tmp"; die "NOTES.txt gives no CRD command that works without a checkout"; }
  for set in image.repository=registry.example.internal/sso global.imageRegistry=registry.example.internal; do
    if notes --set "$set" | grep -q WARNING; then rm -rf "$tmp"; die "NOTES.txt warns about the image with $set"; fi
  done
  rm -rf "$tmp"
  pass "NOTES.txt: warns about the bare default image (not with a repository or registry set), --reuse-values, the CRD from the binary"
}

lint_phase() {
  local f i=0 lint_args lint_out bad
  section "1. helm lint --strict (default values + $((${#VALUES_FILES[@]} - 1)) ci files)"
  for f in "${VALUES_FILES[@]}"; do
    lint_args=(lint --strict "$CHART")
    [ -z "$f" ] || lint_args+=(-f "$f")
    if ! lint_out=$("$HELM" "${lint_args[@]}" 2>&1); then
      printf '%s\n' "$lint_out" >&2
      die "helm lint --strict failed with $(label_of "$f")"
    fi
    # --strict turns warnings into failures; anything else it reports is worth a look.
    if grep -E '^\[(WARNING|ERROR)\]' <<<"$lint_out" >&2; then die "helm lint reported problems with $(label_of "$f")"; fi
    pass "helm lint --strict: $(label_of "$f")"
  done

  # The schema is enforced: a wrong value is refused at render time.
  if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set webhook.failurePolicy=Sometimes 2>&1); then
    die "values.schema.json accepted webhook.failurePolicy=Sometimes"
  fi
  grep -q "failurePolicy" <<<"$bad" || die "the schema error does not name the field: $bad"
  if "$HELM" template "$RELEASE" "$CHART" -n "$NS" --set unknownKey=1 >/dev/null 2>&1; then
    die "values.schema.json accepted an unknown top-level key"
  fi
  pass "values.schema.json refuses a bad enum value and an unknown key"

  # The chart archive carries the licence, the repository's own.
  local pkg
  pkg=$(mktemp -d)
  "$HELM" package "$CHART" -d "$pkg" >/dev/null || die "helm package failed"
  { tar -xzf "$pkg"/*.tgz -C "$pkg" sidecarset-operator/LICENSE 2>/dev/null \
    && cmp -s "$pkg/sidecarset-operator/LICENSE" "$REPO/LICENSE"; } \
    || { rm -rf "$pkg"; die "the chart archive has no LICENSE, or not the repository's (cp LICENSE $CHART/LICENSE)"; }
  rm -rf "$pkg"
  pass "helm package: the chart archive carries the repository's LICENSE"

  # Every probe value the schema accepts reaches the Deployment (startup.timeoutSeconds was once ignored).
  local probes
  probes=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set probes.startup.timeoutSeconds=7 \
    --set probes.liveness.timeoutSeconds=8 --set probes.readiness.timeoutSeconds=9 | python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d.get("kind") == "Deployment":
        c = d["spec"]["template"]["spec"]["containers"][0]
        print(" ".join(str(c[p].get("timeoutSeconds")) for p in ("startupProbe", "livenessProbe", "readinessProbe")))')
  [ "$probes" = "7 8 9" ] || die "probes.*.timeoutSeconds not rendered as given (startup liveness readiness: $probes)"
  pass "probes.{startup,liveness,readiness}.timeoutSeconds reach the Deployment"

  # The knobs of ci/knobs-values.yaml reach the objects; by default there is a NetworkPolicy
  # (webhook port from anywhere until apiServerCIDRs is set) and no PodMonitor, and the pod
  # webhooks keep the built-in exclusions.
  local knobs
  knobs=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" -f "$CHART/ci/knobs-values.yaml" | python3 -c '
import sys, yaml
docs = {d["kind"]: d for d in yaml.safe_load_all(sys.stdin) if d}
c = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
want = ["--leader-lease-duration=20s", "--rollout-rules=strict", "--pod-match-conditions=false",
        "--max-admissions-in-flight=256", "--watch-stale-after=3m"]
bad = [w for w in want if w not in c["args"]]
if {"name": "RUST_LOG", "value": "info,sidecarset_operator=debug"} not in c["env"]: bad.append("RUST_LOG")
for w in docs["MutatingWebhookConfiguration"]["webhooks"]:
    if w["name"].startswith("mpod") and w["namespaceSelector"] != {"matchLabels": {"sidecar-injection": "enabled"}}:
        bad.append(w["name"] + ".namespaceSelector not replaced")
np = docs.get("NetworkPolicy", {}).get("spec", {})
if np.get("ingress", [{}])[0].get("from") != [{"ipBlock": {"cidr": "10.0.0.0/24"}}]: bad.append("NetworkPolicy webhook ingress")
if "PodMonitor" not in docs: bad.append("PodMonitor")
print(" ".join(bad))')
  [ -z "$knobs" ] || die "ci/knobs-values.yaml: not rendered as set: $knobs"
  knobs=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
kinds = {d["kind"] for d in docs}
bad = [k for k in ("PodMonitor",) if k in kinds]
np = [d for d in docs if d["kind"] == "NetworkPolicy"]
if len(np) != 1 or np[0]["spec"]["ingress"][0]["ports"] != [{"port": "webhook", "protocol": "TCP"}]:
    bad.append("NetworkPolicy (on by default, admitting the webhook port)")
for d in docs:
    if d["kind"] == "MutatingWebhookConfiguration":
        for w in d["webhooks"]:
            if w["name"].startswith("mpod") and w["namespaceSelector"]["matchExpressions"][0]["key"] != "kubernetes.io/metadata.name":
                bad.append(w["name"])
print(" ".join(bad))')
  [ -z "$knobs" ] || die "default values render $knobs"
  pass "knobs (log level, lease duration, feature switches, replacing webhook selectors, NetworkPolicy, PodMonitor): rendered as set; by default a NetworkPolicy and no PodMonitor"

  extras_phase

  for f in "${VALUES_FILES[@]}"; do
    i=$((i + 1))
    render "$OUT/rendered-$i.yaml" "$f"
    if grep -nE '^[[:space:]-]*caBundle:' "$OUT/rendered-$i.yaml" >&2; then
      die "$(label_of "$f"): the rendered chart contains caBundle (helm upgrade would reset the operator's CA)"
    fi
  done
  pass "helm template: no caBundle in any of the ${#VALUES_FILES[@]} renderings"

  # Tracing (tracing.*): the operator exports traces only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
  local r=$OUT/tracing-default.yaml names
  render "$r"
  expect_eq "default values: env POD_NAME from the downward API (the operator's identity)" "$(env_of "$r" POD_NAME)" fieldRef:metadata.name
  expect_eq "default values: no OTEL_EXPORTER_OTLP_ENDPOINT (tracing off)" "$(env_of "$r" OTEL_EXPORTER_OTLP_ENDPOINT)" "<unset>"
  names=$(env_names "$r")
  [[ " $names " != *" OTEL_"* ]] || die "default values: the Deployment sets OTEL_* variables although tracing is off: $names"
  pass "default values: no OTEL_* variable at all ($names)"
  f=$CHART/ci/tracing-values.yaml
  r=$OUT/tracing.yaml
  render "$r" "$f"
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_ENDPOINT" "$(env_of "$r" OTEL_EXPORTER_OTLP_ENDPOINT)" http://otel-collector.observability:4318
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_PROTOCOL" "$(env_of "$r" OTEL_EXPORTER_OTLP_PROTOCOL)" http/protobuf
  expect_eq "$(label_of "$f"): OTEL_TRACES_SAMPLER and _ARG" \
    "$(env_of "$r" OTEL_TRACES_SAMPLER) $(env_of "$r" OTEL_TRACES_SAMPLER_ARG)" "parentbased_traceidratio 1.0"
  # env_of also proves that POD_NAME and POD_NAMESPACE come before it (else no expansion).
  expect_eq "$(label_of "$f"): OTEL_RESOURCE_ATTRIBUTES with the pod, its namespace and the extra attribute" \
    "$(env_of "$r" OTEL_RESOURCE_ATTRIBUTES)" "k8s.pod.name=\$(POD_NAME),k8s.namespace.name=\$(POD_NAMESPACE),deployment.environment.name=ci"
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_HEADERS from the Secret" \
    "$(env_of "$r" OTEL_EXPORTER_OTLP_HEADERS)" secretKeyRef:otel-collector-auth/headers
  printf 'tracing:\n  otlpEndpoint: http://otel-collector.observability:4318\n  protocol: carrier-pigeon\n' >"$OUT/tracing-bad-protocol.yaml"
  if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" -f "$OUT/tracing-bad-protocol.yaml" 2>&1); then
    die "values.schema.json accepted tracing.protocol: carrier-pigeon"
  fi
  grep -q "protocol" <<<"$bad" || die "the schema error does not name tracing.protocol: $bad"
  if "$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tracing.sampler=sometimes >/dev/null 2>&1; then
    die "values.schema.json accepted tracing.sampler=sometimes"
  fi
  pass "values.schema.json refuses tracing.protocol: carrier-pigeon (values file) and an unknown tracing.sampler"
  if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tracing.otlpEndpoint=http://c:4317 \
      --set tracing.headersSecret.name=otel-auth 2>&1); then
    die "tracing.headersSecret.name without .key was rendered"
  fi
  grep -q "tracing.headersSecret.key is required" <<<"$bad" || die "tracing.headersSecret without key: unexpected error: $bad"
  pass "tracing.headersSecret.name without .key: helm template fails and says so"

  # tracing.tls: CA and client certificate files from Secrets, for an https collector.
  # Without tracing.tls (default values, and tracing over http): no TLS variables, no volumes.
  local otlp=/etc/sidecarset-operator/otlp label
  for f in "" "$CHART/ci/tracing-values.yaml"; do
    label=$(label_of "$f")
    r=$OUT/tracing-default.yaml
    [ -z "$f" ] || r=$OUT/tracing.yaml
    expect_eq "$label: no OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE or _CLIENT_KEY" \
      "$(env_of "$r" OTEL_EXPORTER_OTLP_CERTIFICATE) $(env_of "$r" OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE) $(env_of "$r" OTEL_EXPORTER_OTLP_CLIENT_KEY)" \
      "<unset> <unset> <unset>"
    expect_eq "$label: volumes / mounts only tmp (no otlp-ca, no otlp-client)" "$(volume_names "$r")" "tmp / tmp"
  done
  f=$CHART/ci/tracing-tls-values.yaml
  r=$OUT/tracing-tls.yaml
  render "$r" "$f"
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_ENDPOINT" "$(env_of "$r" OTEL_EXPORTER_OTLP_ENDPOINT)" https://otel-collector.observability:4317
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_CERTIFICATE (the CA file)" "$(env_of "$r" OTEL_EXPORTER_OTLP_CERTIFICATE)" "$otlp/ca/ca.crt"
  expect_eq "$(label_of "$f"): OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _KEY (the client files)" \
    "$(env_of "$r" OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE) $(env_of "$r" OTEL_EXPORTER_OTLP_CLIENT_KEY)" "$otlp/client/tls.crt $otlp/client/tls.key"
  expect_eq "$(label_of "$f"): volume otlp-ca: ca.crt of Secret otel-collector-ca, 0440, read-only at $otlp/ca" \
    "$(volume_of "$r" otlp-ca)" "secret=otel-collector-ca items=ca.crt:ca.crt mode=0440 mount=$otlp/ca:ro"
  expect_eq "$(label_of "$f"): volume otlp-client: tls.crt and tls.key of Secret sidecarset-operator-otlp-client, 0440, read-only at $otlp/client" \
    "$(volume_of "$r" otlp-client)" "secret=sidecarset-operator-otlp-client items=tls.crt:tls.crt,tls.key:tls.key mode=0440 mount=$otlp/client:ro"
  expect_eq "$(label_of "$f"): volumes and mounts" "$(volume_names "$r")" "tmp otlp-ca otlp-client / tmp otlp-ca otlp-client"
  # Like serving-certs: the kubelet gives the 0440 files to the pod's fsGroup, which is also a
  # supplemental group of the (non-root) operator, so it can read them.
  expect_eq "$(label_of "$f"): the 0440 files are readable by the operator: pod fsGroup 65532" \
    "$(python3 -c '
import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
print((d["spec"]["template"]["spec"].get("securityContext") or {}).get("fsGroup", "<unset>"))' "$r")" 65532
  r=$OUT/tracing-tls-off.yaml
  "$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tracing.tls.caSecret.name=ca \
    --set tracing.tls.clientSecretName=client >"$r" || die "tracing.tls without tracing.otlpEndpoint: helm template failed"
  expect_eq "tracing.tls without tracing.otlpEndpoint (tracing off): no OTEL_* variable, no otlp volumes" \
    "$(env_of "$r" OTEL_EXPORTER_OTLP_CERTIFICATE) $(volume_names "$r")" "<unset> tmp / tmp"
  if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tracing.otlpEndpoint=http://c:4318 \
      --set tracing.tls.clientSecretName=x 2>&1); then
    die "tracing.tls.clientSecretName with an http:// tracing.otlpEndpoint was rendered"
  fi
  grep -qF "tracing.otlpEndpoint (http://c:4318) is not https://" <<<"$bad" || die "tracing.tls with http://: unexpected error: $bad"
  pass "tracing.tls with an http:// tracing.otlpEndpoint: helm template fails and names tracing.otlpEndpoint"
  if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set tracing.otlpEndpoint=https://c:4317 \
      --set tracing.tls.caSecret.name=ca --set tracing.tls.caSecret.key= 2>&1); then
    die "tracing.tls.caSecret.name with an empty .key was rendered"
  fi
  grep -qF "tracing.tls.caSecret.key is required" <<<"$bad" || die "tracing.tls.caSecret without key: unexpected error: $bad"
  pass "tracing.tls.caSecret.name with an empty .key: helm template fails and names tracing.tls.caSecret.key"

  monitoring_checks
}

# monitoring_of RENDERED: "dashboard=<labels>/<panels> rules=<alert names>" of the Grafana
# dashboard ConfigMap and the PrometheusRule in RENDERED (<none> when absent), or <error: ...>.
monitoring_of() {
  python3 -c '
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
rules = [d for d in docs if d["kind"] == "PrometheusRule"]
out = []
if cms:
    cm = cms[0]
    try:
        dash = json.loads(cm["data"]["sidecarset-operator.json"])
    except Exception as e:
        print("<error: the dashboard is not JSON: %s>" % e); sys.exit()
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    labels = ",".join("%s=%s" % kv for kv in sorted(cm["metadata"]["labels"].items()) if kv[0] == "grafana_dashboard")
    out.append("dashboard=%s/%d" % (labels, len(exprs)))
else:
    out.append("dashboard=<none>")
if rules:
    rs = [r for g in rules[0]["spec"]["groups"] for r in g["rules"]]
    bad = [r["alert"] for r in rs if "namespace=\"%s\"" % sys.argv[2] not in r["expr"]]
    if bad:
        print("<error: alerts not scoped to the release namespace: %s>" % bad); sys.exit()
    out.append("rules=" + ",".join(r["alert"] for r in rs))
else:
    out.append("rules=<none>")
print(" ".join(out))' "$1" "$NS"
}

# Grafana dashboard and PrometheusRule: off by default, both with ci/monitoring-values.yaml,
# refused without metrics.enabled.
monitoring_checks() {
  local r=$OUT/monitoring-default.yaml f=$CHART/ci/monitoring-values.yaml bad got
  render "$r"
  expect_eq "default values: no dashboard ConfigMap, no PrometheusRule" "$(monitoring_of "$r")" "dashboard=<none> rules=<none>"
  r=$OUT/monitoring.yaml
  render "$r" "$f"
  got=$(monitoring_of "$r")
  expect_eq "$(label_of "$f"): the dashboard ConfigMap (label grafana_dashboard=1, valid JSON, its queries) and the alerts, scoped to namespace $NS" \
    "$got" "dashboard=grafana_dashboard=1/$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(len(p.get("targets", [])) for p in d["panels"]))' "$CHART/dashboards/sidecarset-operator.json") rules=SidecarSetOperatorWebhookErrors,SidecarSetOperatorPodsRefused,SidecarSetOperatorWebhookSlow,SidecarSetOperatorCertificateExpiring,SidecarSetRolloutStalled,SidecarSetPodsCreatedWithoutSidecars,SidecarSetOperatorDegraded,SidecarSetOperatorLeaderMissing"
  for v in dashboard prometheusRule; do
    if bad=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --set "metrics.$v.enabled=true" 2>&1); then
      die "metrics.$v.enabled without metrics.enabled was rendered"
    fi
    grep -qF "metrics.$v.enabled needs metrics.enabled=true" <<<"$bad" || die "metrics.$v.enabled without metrics: unexpected error: $bad"
  done
  pass "metrics.dashboard.enabled / metrics.prometheusRule.enabled without metrics.enabled: helm template fails and says so"
  if "$HELM" template "$RELEASE" "$CHART" -n "$NS" --set metrics.enabled=true --set metrics.prometheusRule.enabled=true \
      --set metrics.prometheusRule.stalledFor=soon >/dev/null 2>&1; then
    die "values.schema.json accepted metrics.prometheusRule.stalledFor=soon"
  fi
  pass "values.schema.json refuses metrics.prometheusRule.stalledFor=soon"
}

# ---------------------------------------------------------------------------------------------
# --with-cluster

# supply_chain_tamper REL REG: what the signatures are for. An attacker who rewrites the release
# directory (checksums included) or the registry is caught by the public keys: another public
# key, an image the key never signed, a changed chart archive and a changed SBOM fail to verify.
supply_chain_tamper() {
  local rel=$1 reg=$2 tam=$OUT/release-tampered out f
  copy_release() { rm -rf "$tam"; mkdir -p "$tam"; cp "$rel"/* "$tam/"; }
  sums() { (cd "$tam" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum -- >SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS); }
  chain_verify() { REGISTRY_INSECURE=1 SSO_WORK=$WORK "$REPO/hack/supply-chain.sh" verify "$tam" 2>&1; }
  # 1. Another public key.
  copy_release
  "$REPO/hack/supply-chain.sh" test-keys "$tam/other-keys" >/dev/null || die "hack/supply-chain.sh test-keys failed"
  if out=$(COSIGN_PUB=$tam/other-keys/cosign.pub chain_verify); then die "the release verified with another cosign public key"; fi
  { grep -q 'FAIL signature: the image' <<<"$out" && grep -q 'FAIL signature: the chart' <<<"$out"; } \
    || die "verify with another public key failed, but not on the signatures: $out"
  pass "supply chain: another cosign public key does not verify the image or the chart"
  # 2. Another image in the registry, recorded in release.json as the release's.
  local image other
  image=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"]["pushed"])' "$rel/release.json")
  eval "$("$REPO/hack/tools.sh" crane)"
  "$CRANE_BIN/crane" mutate --insecure --label tampered=1 "$image" -t "$reg/sidecarset-operator:tampered" >/dev/null 2>&1 \
    || die "crane mutate $image failed"
  other=$reg/sidecarset-operator@$("$CRANE_BIN/crane" digest --insecure "$reg/sidecarset-operator:tampered")
  copy_release
  python3 - "$tam/release.json" "$other" <<'PY'
import json, sys
p, ref = sys.argv[1:]
d = json.load(open(p)); d["image"]["pushed"] = ref; d["image"]["digest"] = ref.split("@")[1]
json.dump(d, open(p, "w"), indent=2)
PY
  sums
  if out=$(chain_verify); then die "the release verified with an image ($other) the key never signed"; fi
  grep -q "FAIL signature: the image $other" <<<"$out" || die "verify of an unsigned image failed, but not on its signature: $out"
  pass "supply chain: an image the key did not sign (${other#*@}) fails verification"
  # 3. The chart archive changed (a file added), checksums rewritten.
  copy_release
  f=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chart"]["file"])' "$rel/release.json")
  mkdir -p "$tam/x" && tar -xzf "$tam/$f" -C "$tam/x" && echo "tampered: true" >>"$tam/x/sidecarset-operator/values.yaml"
  tar -C "$tam/x" -czf "$tam/$f" sidecarset-operator && rm -rf "$tam/x"
  sums
  if out=$(chain_verify); then die "the release verified with a changed chart archive"; fi
  grep -q "FAIL helm provenance: $f" <<<"$out" || die "verify of a changed chart archive failed, but not on its provenance file: $out"
  pass "supply chain: a changed chart archive fails helm verify against its .prov"
  # 4. The SBOM changed: the signed attestation no longer matches the release's file.
  copy_release
  f=$(find "$tam" -maxdepth 1 -name '*.image.cdx.json' -printf '%f\n' | head -n1)
  python3 - "$tam/$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["components"] = d["components"][1:]
json.dump(d, open(sys.argv[1], "w"), indent=2, sort_keys=True)
PY
  sums
  if out=$(chain_verify); then die "the release verified with a changed SBOM"; fi
  grep -q "FAIL attestation: cyclonedx" <<<"$out" || die "verify of a changed SBOM failed, but not on the attestation: $out"
  pass "supply chain: an SBOM other than the attested one fails verification"
  gpgconf --homedir "$tam/other-keys/gnupg" --kill gpg-agent 2>/dev/null || true
  rm -rf "$tam"
}

# Step 7 (also alone: hack/chart-test.sh release).
release_phase() {
  section "7. the release: reproducible build, signatures, SBOM and provenance, chart from an OCI registry (by version, by digest), image digest, Krew sha256"
  local t0=$SECONDS bin rel=$OUT/release version reg out
  # Debian's gnupg signs the chart's provenance file (installed here when missing, as root).
  if ! command -v gpg >/dev/null; then
    { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } || die "the release step needs gpg (Debian package gnupg)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gnupg; } >"$OUT/apt-gnupg.log" 2>&1 \
      || { tail -n 20 "$OUT/apt-gnupg.log" >&2; die "apt-get install gnupg failed"; }
  fi
  # The image is packed with umoci and skopeo: installed here when missing (as root, with apt-get),
  # as the real node's suites do, since on a new machine this step runs before them.
  if ! { command -v umoci >/dev/null && command -v skopeo >/dev/null; }; then
    SSO_WORK=$WORK "$REPO/hack/node.sh" deps \
      || die "the release step builds the image with umoci and skopeo (apt-get install umoci skopeo), or set SSO_CHART_TEST_RELEASE=0"
  fi
  if ! SSO_WORK=$WORK "$REPO/hack/registry.sh" env >/dev/null 2>&1; then REGISTRY_STARTED=1; fi
  eval "$(SSO_WORK=$WORK "$REPO/hack/registry.sh" up 2>/dev/null)"
  reg=$SSO_REGISTRY
  version=$(sed -n 's/^version: *//p' "$CHART/Chart.yaml")
  if [ -z "${FULLNAME:-}" ]; then # `hack/chart-test.sh release`: the names from a rendering
    render "$OUT/default.yaml"
    read -r CFG FULLNAME SA < <(python3 -c '
import sys, yaml
docs = {d["kind"]: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
print(docs["MutatingWebhookConfiguration"]["metadata"]["name"], docs["Deployment"]["metadata"]["name"],
      docs["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"])' "$OUT/default.yaml")
  fi
  # A working tree with changes is refused (a clone of HEAD with one untracked file; nothing is built).
  local clone=$OUT/release-clone
  rm -rf "$clone"
  git clone -q --shared "$REPO" "$clone"
  touch "$clone/untracked-file"
  if out=$(cd "$clone" && BIN=/nonexistent CHART_REPO=oci://127.0.0.1:1/x "$clone/hack/release.sh" 2>&1); then
    rm -rf "$clone"; die "hack/release.sh ran on a working tree with an untracked file: $out"
  fi
  grep -q 'the working tree has changes' <<<"$out" || { rm -rf "$clone"; die "hack/release.sh on a dirty tree failed, but not for that: $out"; }
  rm -rf "$clone"
  pass "release: refused on a working tree with changes (ALLOW_DIRTY=1 overrides)"
  # The binary to release: with SSO_CHART_TEST_REPRODUCE=1 the release binary of HEAD built twice
  # in two directories (hack/release.sh reproduce: the same binary and image digest, or the step
  # fails; about 12 minutes from a cold Cargo cache, 7 for the dependencies in release mode and 4
  # for the second build); otherwise one debug build with cargo auditable in the workspace's
  # target directory (its dependencies are the build phase's, so only the workspace's crates
  # compile), which is all the signing, SBOM, provenance and verification steps need.
  # `make release-reproduce` runs the reproducibility check alone.
  local t=$SECONDS
  if [ -n "${BIN:-}" ]; then
    # A release binary given (built with cargo auditable): the reproducibility check is left out.
    bin=$BIN
    log "  BIN=$bin given: the two reproducible builds are left out"
  elif [ "${SSO_CHART_TEST_REPRODUCE:-0}" != 1 ]; then
    eval "$("$REPO/hack/tools.sh" cargo-auditable)"
    (cd "$REPO" && PATH=$CARGO_AUDITABLE_BIN:$PATH cargo auditable build --locked --bin sidecarset-operator) \
      >"$OUT/auditable-build.log" 2>&1 || { cat "$OUT/auditable-build.log" >&2; die "cargo auditable build failed"; }
    mkdir -p "$OUT/release-bin"
    cp "$REPO/target/debug/sidecarset-operator" "$OUT/release-bin/sidecarset-operator"
    bin=$OUT/release-bin/sidecarset-operator
    log "  one debug build with cargo auditable ($((SECONDS - t)) s); SSO_CHART_TEST_REPRODUCE=1 or make release-reproduce for the two reproducible release builds"
  else
    SSO_WORK=$WORK "$REPO/hack/release.sh" reproduce "$OUT/release-bin" >"$OUT/reproduce.log" 2>&1 \
      || { cat "$OUT/reproduce.log" >&2; die "hack/release.sh reproduce failed"; }
    grep '^\[release\] \(build\|reproducible\)' "$OUT/reproduce.log" | sed 's/^/      /' >&2
    pass "reproducible: two builds of HEAD in two directories give one binary and one image digest ($((SECONDS - t)) s)"
    bin=$OUT/release-bin/sidecarset-operator
  fi
  # A throwaway cosign key pair and PGP key; the release is signed with them and verified with the
  # public halves only.
  local keys
  keys=$("$REPO/hack/supply-chain.sh" test-keys "$OUT/release-keys") || die "hack/supply-chain.sh test-keys failed"
  eval "$keys"
  export COSIGN_KEY COSIGN_PASSWORD COSIGN_PUB HELM_SIGN_KEY HELM_KEYRING GNUPGHOME
  t=$SECONDS
  ALLOW_DIRTY=1 RELEASE_DIR=$rel BIN=$bin CHART_REPO=oci://$reg/charts IMAGE_REPO=$reg/sidecarset-operator PLAIN_HTTP=1 \
    SSO_WORK=$WORK "$REPO/hack/release.sh" >"$OUT/release.log" 2>&1 || { cat "$OUT/release.log" >&2; die "hack/release.sh failed"; }
  grep '^\[release\] \(ok\|release\|chart\|image\|krew\|sbom\|signed\)' "$OUT/release.log" | sed 's/^/      /' >&2
  pass "release: made and verified in $((SECONDS - t)) s (SHA256SUMS, Krew sha256, image digest by crane, chart digest in the registry, cosign signatures of image and chart, SBOM and provenance attestations, Helm provenance, the binary's dependency list)"
  supply_chain_tamper "$rel" "$reg"
  local chart_digest image_digest
  chart_digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chart"]["digest"])' "$rel/release.json")
  image_digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"]["digest"])' "$rel/release.json")
  # A tampered Krew manifest does not verify.
  # (links to the release's files, but for the manifest and the checksums, which stay right).
  local tam=$OUT/release-tampered f
  rm -rf "$tam"
  mkdir -p "$tam"
  for f in "$rel"/*; do ln -s "$f" "$tam/$(basename "$f")"; done
  rm "$tam/sidecarset.yaml" "$tam/SHA256SUMS"
  sed 's/^\(  *sha256: \).*/\1"'"$(printf '%064d' 1)"'"/' "$rel/sidecarset.yaml" >"$tam/sidecarset.yaml"
  { grep -v '  sidecarset.yaml$' "$rel/SHA256SUMS"; (cd "$tam" && sha256sum sidecarset.yaml); } >"$tam/SHA256SUMS"
  if out=$(REGISTRY=$reg SSO_WORK=$WORK "$REPO/hack/release.sh" verify "$tam" 2>&1); then
    die "hack/release.sh verify accepted a Krew manifest whose sha256 is not its archive's"
  fi
  grep -q 'FAIL krew: .*manifest sha256 0*1, archive' <<<"$out" || die "verify of a tampered Krew manifest failed, but not on its sha256: $out"
  rm -rf "$tam"
  pass "release verify: a Krew manifest with another sha256 is refused"

  # Installed from the registry by version, then by digest; the image by the release's digest.
  local img_args=(--set image.repository="$reg/sidecarset-operator" --set image.digest="$image_digest")
  install_from() { # REF [--version V]: helm install, deployed, its objects there, uninstall
    local ref=$1 what=$2
    shift 2
    out=$("$HELM" install "$RELEASE" "$ref" "$@" --plain-http -n "$NS" --set webhook.timeoutSeconds=3 "${img_args[@]}" \
      --wait --timeout "${TIMEOUT}s" 2>&1) || { printf '%s\n' "$out" >&2; die "helm install $ref $* failed"; }
    INSTALLED=1
    expect_eq "helm install $what: deployed, chart sidecarset-operator-$version" \
      "$("$HELM" list -n "$NS" --filter "^$RELEASE\$" -o json | python3 -c 'import json,sys; d=json.load(sys.stdin)[0]; print(d["status"] + ", chart " + d["chart"])')" \
      "deployed, chart sidecarset-operator-$version"
    expect_eq "installed $what: Deployment 2/2 ready, image $reg/sidecarset-operator@$image_digest" \
      "$(jpath deployment "$FULLNAME" '{.status.readyReplicas}/{.spec.replicas} {.spec.template.spec.containers[0].image}' -n "$NS")" \
      "2/2 $reg/sidecarset-operator@$image_digest"
    for obj in "mutatingwebhookconfiguration/$CFG" "validatingwebhookconfiguration/$CFG" "clusterrole/$FULLNAME" "crd/$CRD_NAME"; do
      k get "$obj" >/dev/null || die "installed $what: $obj is missing"
    done
    for obj in "service/$FULLNAME-webhook" "poddisruptionbudget/$FULLNAME" "serviceaccount/$SA"; do
      k -n "$NS" get "$obj" >/dev/null || die "installed $what: $obj is missing in $NS"
    done
    pass "installed $what: webhook configurations, RBAC, Service, PDB, ServiceAccount, CRD"
    "$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout "${TIMEOUT}s" >/dev/null || die "helm uninstall failed"
    INSTALLED=0
  }
  # By version with helm's own check of the provenance file pushed with the chart (the PGP public
  # key only); by digest after the release's verify checked the cosign signatures of both
  # digests (helm 3.22 cannot --verify a pull by digest: it names the archive after the digest,
  # which the provenance file does not list).
  install_from "oci://$reg/charts/sidecarset-operator" "oci://$reg/charts/sidecarset-operator --version $version --verify" \
    --version "$version" --verify --keyring "$HELM_KEYRING"
  install_from "oci://$reg/charts/sidecarset-operator@$chart_digest" "oci://$reg/charts/sidecarset-operator@${chart_digest:0:19}…"
  local wrong
  wrong=sha256:$(printf '%064d' 0)
  if out=$("$HELM" install "$RELEASE" "oci://$reg/charts/sidecarset-operator@$wrong" --plain-http -n "$NS" 2>&1); then
    INSTALLED=1; die "helm install by a digest the registry does not have succeeded"
  fi
  pass "helm install by a digest the registry does not have: refused ($(tail -n1 <<<"$out" | cut -c1-100))"
  rm -rf "$OUT/release-bin"
  gpgconf --homedir "$GNUPGHOME" --kill gpg-agent 2>/dev/null || true
  log "  release step: $((SECONDS - t0)) s; artifacts: $(find "$rel" -maxdepth 1 -type f -printf '%f %kK, ' | sort)"
}

WITH_CLUSTER=0
ONLY_RELEASE=0
case ${1:-} in
  --with-cluster) WITH_CLUSTER=1 ;;
  release) ONLY_RELEASE=1 ;;
  lint)
    NEED_KUBECTL=0 find_tools
    mkdir -p "$OUT"
    lint_phase
    printf '\n[chart-test] PASSED (lint only, no cluster): %d checks\n' "${#PASSED[@]}" >&2
    exit 0 ;;
  '') ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--with-cluster] | lint | release | sa-kubeconfig OUT [DURATION]" >&2; exit 2 ;;
esac

if [ "$WITH_CLUSTER" = 1 ]; then
  export SSO_CLUSTER_NAME=${SSO_CLUSTER_NAME:-sidecarset-chart-test}
  export SSO_WORK=$WORK
  "$REPO/hack/cluster.sh" up
  eval "$("$REPO/hack/cluster.sh" env)"
fi
[ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set: start a cluster (make cluster-up; eval \"\$(hack/cluster.sh env)\") or use --with-cluster"

find_tools
mkdir -p "$OUT"
SA_KUBECONFIG=$OUT/serviceaccount.kubeconfig
FOREIGN_VWC=sso-chart-test-foreign-$$
CREATED_NS=0
CRD_EXISTED=0
INSTALLED=0
REGISTRY_STARTED=0
DONE=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ "$DONE" != 1 ]; then
    log "---- diagnostics (exit $rc)"
    "$HELM" status "$RELEASE" -n "$NS" 2>&1 | head -n 6 >&2
    k -n "$NS" get all,sa,role,rolebinding,pdb -o wide >&2 2>&1
    k -n "$NS" get events --sort-by=.lastTimestamp 2>&1 | tail -n 20 >&2
  fi
  k delete validatingwebhookconfiguration "$FOREIGN_VWC" --ignore-not-found >/dev/null 2>&1
  if [ "$REGISTRY_STARTED" = 1 ]; then SSO_WORK=$WORK "$REPO/hack/registry.sh" down >/dev/null 2>&1; fi
  if [ "$INSTALLED" = 1 ]; then
    log "cleanup: helm uninstall $RELEASE"
    "$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout "${TIMEOUT}s" >/dev/null 2>&1
  fi
  if [ "$CREATED_NS" = 1 ]; then
    k delete namespace "$NS" --timeout="${TIMEOUT}s" >/dev/null 2>&1
  fi
  if [ "$CRD_EXISTED" = 0 ]; then
    # Leave the cluster as it was found: the CRD was installed by this test.
    k delete crd "$CRD_NAME" --ignore-not-found --wait=false >/dev/null 2>&1
  fi
  rm -f "$SA_KUBECONFIG"
  if [ "$WITH_CLUSTER" = 1 ]; then
    "$REPO/hack/cluster.sh" down
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

k get --raw=/readyz >/dev/null 2>&1 || die "the API server of KUBECONFIG=$KUBECONFIG does not answer /readyz"
log "cluster: $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}') (server $(k version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"
log "helm: $("$HELM" version --short); kubectl: $KUBECTL; release $RELEASE in namespace $NS"

if [ "$ONLY_RELEASE" = 1 ]; then
  k get namespace "$NS" >/dev/null 2>&1 || { k create namespace "$NS" >/dev/null; CREATED_NS=1; }
  if k get crd "$CRD_NAME" >/dev/null 2>&1; then CRD_EXISTED=1; fi
  release_phase
  DONE=1
  printf '\n[chart-test] PASSED (step 7 only): %d checks\n' "${#PASSED[@]}" >&2
  exit 0
fi

lint_phase

# ---------------------------------------------------------------------------------------------
section "2. helm template + server-side dry run"

ns_gone() { ! k get namespace "$NS" >/dev/null 2>&1; }
if [ "$(jpath namespace "$NS" '{.status.phase}' 2>/dev/null)" = Terminating ]; then
  log "namespace $NS is being deleted; waiting"
  wait_until "$TIMEOUT" "namespace $NS to be deleted" ns_gone
fi
if k get namespace "$NS" >/dev/null 2>&1; then
  log "namespace $NS exists already"
else
  k create namespace "$NS" >/dev/null
  CREATED_NS=1
fi
# The operator must run under the restricted Pod Security profile: enforce it (pods that break
# it are refused) and warn (a Deployment that would break it draws a warning on dry run).
k label namespace "$NS" --overwrite pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/warn=restricted >/dev/null

if k get crd "$CRD_NAME" >/dev/null 2>&1; then CRD_EXISTED=1; fi
crd_out=$(k apply --server-side --dry-run=server --field-manager=chart-test -f "$CHART/crds/" 2>&1) \
  || { printf '%s\n' "$crd_out" >&2; die "server-side dry run of the chart's CRD failed"; }
pass "server-side dry run: crds/$(basename "$CHART"/crds/*.yaml)"

# served APIVERSION KIND: does the API server serve this kind?
served() {
  local gv=$1 kind=$2 path
  if [ "$gv" = v1 ]; then path=/api/v1; else path=/apis/$gv; fi
  # An API group the server does not serve gives no output at all.
  k get --raw="$path" 2>/dev/null | python3 -c '
import json, sys
text = sys.stdin.read()
kinds = {r["kind"] for r in json.loads(text).get("resources", []) if "/" not in r["name"]} if text.strip() else set()
sys.exit(0 if sys.argv[1] in kinds else 1)' "$kind"
}

SKIPPED_KINDS=()
i=0
for f in "${VALUES_FILES[@]}"; do
  i=$((i + 1))
  rendered=$OUT/rendered-$i.yaml
  render "$rendered" "$f"
  # Kinds of the rendering, and which of them the cluster serves.
  mapfile -t kinds < <(python3 -c '
import sys, yaml
seen = set()
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and (d["apiVersion"], d["kind"]) not in seen:
        seen.add((d["apiVersion"], d["kind"])); print(d["apiVersion"], d["kind"])' "$rendered")
  drop=()
  for gk in "${kinds[@]}"; do
    read -r gv kind <<<"$gk"
    served "$gv" "$kind" || drop+=("$gv/$kind")
  done
  filtered=$OUT/rendered-$i.served.yaml
  # `helm test`'s hooks (the check pod, its ServiceAccount and RBAC) exist only while `helm test`
  # runs, and the pod's ServiceAccount is not there in a dry run: they are left out here and run
  # for real by hack/e2e-node.sh (`helm test` after the install page's verify block).
  python3 -c '
import sys, yaml
drop = set(sys.argv[3:])
def test_hook(d):
    hooks = ((d.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")
    return "test" in [h.strip() for h in hooks.split(",")]
docs = [d for d in yaml.safe_load_all(open(sys.argv[1]))
        if d and d["apiVersion"] + "/" + d["kind"] not in drop and not test_hook(d)]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"), sort_keys=False)
print(len(docs))' "$rendered" "$filtered" "${drop[@]}" >"$OUT/count"
  n=$(cat "$OUT/count")
  if ! dry=$(k apply --dry-run=server -f "$filtered" 2>&1); then
    printf '%s\n' "$dry" >&2
    die "server-side dry run failed with $(label_of "$f") ($rendered)"
  fi
  if grep -i 'warning' <<<"$dry" >&2; then die "server-side dry run with $(label_of "$f") drew warnings (Pod Security?)"; fi
  note=""
  if [ ${#drop[@]} -gt 0 ]; then
    note=" (left out, CRD not installed on this cluster: ${drop[*]})"
    SKIPPED_KINDS+=("$(label_of "$f"): ${drop[*]}")
  fi
  pass "dry run: $(label_of "$f"): $n objects accepted$note"
done

# ---------------------------------------------------------------------------------------------
section "3. helm install"

if "$HELM" status "$RELEASE" -n "$NS" >/dev/null 2>&1; then
  die "release '$RELEASE' already exists in namespace '$NS'; uninstall it first (helm uninstall $RELEASE -n $NS) or set SSO_CHART_RELEASE"
fi
render "$OUT/default.yaml"
CFG=$(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "MutatingWebhookConfiguration": print(d["metadata"]["name"])' "$OUT/default.yaml")
FULLNAME=$(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment": print(d["metadata"]["name"])' "$OUT/default.yaml")
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration clusterrole clusterrolebinding; do
  if k get "$kind" "$CFG" >/dev/null 2>&1 || k get "$kind" "$FULLNAME" >/dev/null 2>&1; then
    die "a $kind named '$CFG' or '$FULLNAME' already exists on this cluster, not from a Helm release (an operator started with --manage-webhooks, e.g. make run / e2e-local?). Remove it or choose another SSO_CHART_RELEASE"
  fi
done

# A short webhook timeout: no operator answers on kwok, and the admission probes below wait for it.
install_out=$("$HELM" install "$RELEASE" "$CHART" -n "$NS" --set webhook.timeoutSeconds=3 \
  --wait --timeout "${TIMEOUT}s" 2>&1) || { printf '%s\n' "$install_out" >&2; die "helm install failed"; }
INSTALLED=1
expect_eq "helm install: release status" "$("$HELM" status "$RELEASE" -n "$NS" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["info"]["status"])')" deployed
grep -q 'kubectl get sidecarsets' <<<"$install_out" || die "helm install did not print NOTES.txt (no 'kubectl get sidecarsets' in its output)"
pass "NOTES.txt printed (how to check that it works)"

expect_eq "CRD $CRD_NAME established" "$(jpath crd "$CRD_NAME" '{.status.conditions[?(@.type=="Established")].status}')" True
SA=$(jpath deployment "$FULLNAME" '{.spec.template.spec.serviceAccountName}' -n "$NS")
k -n "$NS" get serviceaccount "$SA" >/dev/null || die "ServiceAccount $NS/$SA is missing"
pass "ServiceAccount $NS/$SA"
for obj in clusterrole/"$FULLNAME" clusterrolebinding/"$FULLNAME"; do
  k get "$obj" >/dev/null || die "$obj is missing"
done
for obj in role/"$FULLNAME" rolebinding/"$FULLNAME"; do
  k -n "$NS" get "$obj" >/dev/null || die "$obj is missing in $NS"
done
expect_eq "ClusterRoleBinding binds the ServiceAccount" \
  "$(jpath clusterrolebinding "$FULLNAME" '{.subjects[0].namespace}/{.subjects[0].name}')" "$NS/$SA"
pass "RBAC: ClusterRole, ClusterRoleBinding, Role, RoleBinding"

expect_eq "Deployment: 2 replicas ready" "$(jpath deployment "$FULLNAME" '{.spec.replicas}/{.status.readyReplicas}' -n "$NS")" 2/2
DEPLOY_ARGS=$(jpath deployment "$FULLNAME" '{.spec.template.spec.containers[0].args}' -n "$NS")
for want in "--webhook-config-name=$CFG" --cert-mode=self "--webhook-service=$FULLNAME-webhook" --listen=0.0.0.0:9443 \
  --leader-elect=true "--leader-lease-name=$FULLNAME"; do
  grep -qF -- "\"$want\"" <<<"$DEPLOY_ARGS" || die "Deployment args lack $want: $DEPLOY_ARGS"
done
pass "Deployment args: --webhook-config-name=$CFG --cert-mode=self --webhook-service=$FULLNAME-webhook --leader-elect=true"
expect_eq "Deployment env POD_NAMESPACE from the downward API" \
  "$(jpath deployment "$FULLNAME" '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAMESPACE")].valueFrom.fieldRef.fieldPath}' -n "$NS")" metadata.namespace
expect_eq "Deployment env POD_NAME from the downward API" \
  "$(jpath deployment "$FULLNAME" '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAME")].valueFrom.fieldRef.fieldPath}' -n "$NS")" metadata.name
expect_eq "probes: HTTPS /healthz and /readyz" \
  "$(jpath deployment "$FULLNAME" '{.spec.template.spec.containers[0].livenessProbe.httpGet.scheme} {.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.path}' -n "$NS")" \
  "HTTPS /healthz /readyz"
# The namespace enforces "restricted": the pods exist, so the API server admitted them.
npods=$(k -n "$NS" get pods -l "app.kubernetes.io/instance=$RELEASE" --no-headers 2>/dev/null | wc -l)
expect_eq "2 operator pods admitted under Pod Security 'restricted' (enforced on $NS)" "$npods" 2
expect_eq "Service $FULLNAME-webhook: 443 -> webhook (9443)" \
  "$(jpath service "$FULLNAME-webhook" '{.spec.ports[0].port}->{.spec.ports[0].targetPort}' -n "$NS")" "443->webhook"
expect_eq "PodDisruptionBudget minAvailable 1" "$(jpath pdb "$FULLNAME" '{.spec.minAvailable}' -n "$NS")" 1
pdb_counts() { [ "$(jpath pdb "$FULLNAME" '{.status.currentHealthy}/{.status.disruptionsAllowed}' -n "$NS")" = 2/1 ]; }
wait_until 30 "the PodDisruptionBudget to count 2 healthy pods" pdb_counts
pass "PodDisruptionBudget: 2 healthy, 1 disruption allowed"

expect_eq "MutatingWebhookConfiguration $CFG: webhooks" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[*].name}')" "mpod.sidecarset-operator.io mpod-update.sidecarset-operator.io msidecarset.sidecarset-operator.io"
expect_eq "ValidatingWebhookConfiguration $CFG: webhooks" \
  "$(jpath validatingwebhookconfiguration "$CFG" '{.webhooks[*].name}')" "vsidecarset.sidecarset-operator.io"
expect_eq "no caBundle after install (the operator writes it)" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[*].clientConfig.caBundle}')$(jpath validatingwebhookconfiguration "$CFG" '{.webhooks[*].clientConfig.caBundle}')" ""
expect_eq "pod webhook excludes $NS and kube-system" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[0].namespaceSelector.matchExpressions[0].values}')" "[\"$NS\",\"kube-system\"]"

# Admission probes: server-side dry runs call webhooks whose sideEffects are None. No operator
# answers on kwok, so with failurePolicy Fail a call shows up as a refusal naming the webhook.
probe_pod() { # NAMESPACE NAME [LABEL_KEY LABEL_VALUE]: a restricted-compliant pod, dry run only
  local labels="{}"
  [ -z "${3:-}" ] || labels="{\"$3\": \"$4\"}"
  k apply --dry-run=server -o name -f - 2>&1 <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$2", "namespace": "$1", "labels": $labels},
 "spec": {"securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
          "containers": [{"name": "c", "image": "sso-probe.invalid/pause:0",
                          "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}
EOF
}
# The install window: no replica answers yet (none runs on kwok, as with an image the nodes
# cannot pull), and no SidecarSet exists. The chart's match condition matches nothing, so no
# pod of the cluster is sent to the webhook: none is refused.
expect_eq "new install without SidecarSets: the pod webhook's match condition matches nothing" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[0].matchConditions[*].name}={.webhooks[0].matchConditions[*].expression}')" \
  "selected-by-a-sidecarset=false"
refused=0
for i in 1 2 3 4 5; do probe_pod default "sso-probe-$i" >/dev/null || refused=$((refused + 1)); done
[ "$refused" = 0 ] || die "install window: $refused of 5 pods in 'default' refused while no replica answers"
pass "install window: 0 of 5 pods in 'default' refused while no replica answers (failurePolicy Fail)"
# What the operator does once a SidecarSet exists: it widens the condition (as its own field
# manager, server-side apply). Written here to a condition every pod matches, so the selectors
# below are exercised.
printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: %s\nwebhooks:\n- name: mpod.sidecarset-operator.io\n  matchConditions:\n  - name: selected-by-a-sidecarset\n    expression: "true"\n' "$CFG" \
  | k apply --server-side --force-conflicts --field-manager="$MATCH_CONDITIONS_MANAGER" -f - >/dev/null \
  || die "cannot write the pod webhook's match condition as $MATCH_CONDITIONS_MANAGER"
out=$(probe_pod default sso-probe) && die "a pod in namespace default was admitted without the pod webhook being called: $out"
grep -q 'mpod.sidecarset-operator.io' <<<"$out" || die "a pod in namespace default was refused, but not by mpod.sidecarset-operator.io: $out"
pass "admission: with the condition widened, a pod in 'default' goes through mpod.sidecarset-operator.io (failurePolicy Fail, no operator: refused)"
out=$(probe_pod default sso-probe app.kubernetes.io/name sidecarset-operator) \
  || die "a pod labelled as the operator's was sent to the webhook (objectSelector): $out"
pass "admission: the operator's own pods skip the webhook (objectSelector)"
out=$(probe_pod "$NS" sso-probe) || die "a pod in the release namespace $NS was sent to the webhook (namespaceSelector): $out"
pass "admission: pods in $NS skip the webhook (namespaceSelector)"
out=$(probe_pod kube-system sso-probe) || die "a pod in kube-system was sent to the webhook (namespaceSelector): $out"
pass "admission: pods in kube-system skip the webhook (namespaceSelector)"
out=$(k apply --dry-run=server -f "$REPO/config/samples/sidecarset.yaml" 2>&1) && die "a SidecarSet was admitted without the SidecarSet webhooks being called: $out"
grep -q 'sidecarset.sidecarset-operator.io' <<<"$out" || die "a SidecarSet was refused, but not by the SidecarSet webhooks: $out"
pass "admission: SidecarSets go through the SidecarSet webhooks (failurePolicy Fail)"

# ---------------------------------------------------------------------------------------------
section "4. RBAC as the chart's ServiceAccount (token from the TokenRequest API)"

write_sa_kubeconfig "$SA_KUBECONFIG" 30m
expect_eq "authenticated as the ServiceAccount" \
  "$(ksa auth whoami -o jsonpath='{.status.userInfo.username}')" "system:serviceaccount:$NS:$SA"
ksa auth can-i --list -n "$NS" >"$OUT/can-i-list.txt" 2>&1 || die "kubectl auth can-i --list failed: $(cat "$OUT/can-i-list.txt")"
log "  kubectl auth can-i --list -n $NS (as $SA):"
sed 's/^/      /' "$OUT/can-i-list.txt" >&2

SECRET=$(python3 -c '
import sys
a = sys.argv[1]
print([x.split("=", 1)[1] for x in __import__("json").loads(a) if x.startswith("--cert-secret-name=")][0])' "$DEPLOY_ARGS")
LEASE=$(python3 -c '
import json, sys
print([x.split("=", 1)[1] for x in json.loads(sys.argv[1]) if x.startswith("--leader-lease-name=")][0])' "$DEPLOY_ARGS")

# can VERB RESOURCE [ARGS...]: as the ServiceAccount
can() {
  local r
  r=$(ksa auth can-i "$@" 2>"$OUT/can-i.err") || true
  [ "$r" = yes ] || die "the ServiceAccount may not '$*' (answer: $r $(cat "$OUT/can-i.err")), but the operator needs it"
  pass "may     $*"
}
cannot() {
  local r
  r=$(ksa auth can-i "$@" 2>"$OUT/can-i.err") || true
  [ "$r" = no ] || die "the ServiceAccount may '$*' (answer: $r $(cat "$OUT/can-i.err")), more than the operator needs"
  pass "may not $*"
}
# What the operator does (crates/operator/src/run.rs, crates/operator/src/certs): watch SidecarSets and namespaces, patch pods,
# write status, events, its Secret, caBundle of its two configurations, Leases, revisions.
for v in get list watch patch update; do can "$v" sidecarsets.apps.kruise.io; done
for v in get patch update; do can "$v" sidecarsets.apps.kruise.io --subresource=status; done
for v in get list watch; do can "$v" namespaces; done
for v in get list watch patch update; do can "$v" pods --all-namespaces; done
for v in get patch update; do can "$v" pods --subresource=status --all-namespaces; done
can patch pods --subresource=resize --all-namespaces
can list nodes
can create events -n default
can create events.events.k8s.io -n default
for v in get list watch; do can "$v" mutatingwebhookconfigurations; can "$v" validatingwebhookconfigurations; done
for v in patch update; do
  can "$v" "mutatingwebhookconfigurations/$CFG"
  can "$v" "validatingwebhookconfigurations/$CFG"
done
for v in get list watch patch; do can "$v" customresourcedefinitions.apiextensions.k8s.io/sidecarsets.apps.kruise.io; done
can create secrets -n "$NS"
for v in get list watch update patch; do can "$v" "secrets/$SECRET" -n "$NS"; done
for v in get list watch create; do can "$v" leases.coordination.k8s.io -n "$NS"; done
for v in update patch; do can "$v" "leases.coordination.k8s.io/$LEASE" -n "$NS"; done
for v in get list watch create update patch delete; do can "$v" controllerrevisions.apps -n "$NS"; done
can create podtemplates -n "$NS"
# What it must not do.
cannot patch mutatingwebhookconfigurations/some-other-webhook
cannot update validatingwebhookconfigurations/some-other-webhook
cannot create mutatingwebhookconfigurations
cannot delete "mutatingwebhookconfigurations/$CFG"
cannot get secrets -n kube-system
cannot list secrets -n default
cannot list secrets -n "$NS"
cannot get secrets/some-other-secret -n "$NS"
cannot delete "secrets/$SECRET" -n "$NS"
cannot delete namespaces
cannot get nodes
cannot patch nodes
cannot create pods -n default
cannot create pods -n "$NS"
cannot create podtemplates -n default
cannot delete pods -n default
cannot create sidecarsets.apps.kruise.io
cannot delete sidecarsets.apps.kruise.io
cannot create customresourcedefinitions.apiextensions.k8s.io
cannot patch customresourcedefinitions.apiextensions.k8s.io/some-other-crd.example.com
cannot delete customresourcedefinitions.apiextensions.k8s.io/sidecarsets.apps.kruise.io
cannot create clusterrolebindings.rbac.authorization.k8s.io
cannot update leases.coordination.k8s.io/some-other-lease -n "$NS"
cannot create controllerrevisions.apps -n default
cannot '*' '*'

# Real requests with the token, not only can-i.
ksa get sidecarsets >/dev/null 2>&1 || die "as the ServiceAccount: kubectl get sidecarsets failed"
ksa get namespaces >/dev/null || die "as the ServiceAccount: kubectl get namespaces failed"
ksa get pods -A >/dev/null || die "as the ServiceAccount: kubectl get pods -A failed"
out=$(ksa -n "$NS" get secret "$SECRET" 2>&1) && die "secret $NS/$SECRET exists, but no operator ran"
grep -q NotFound <<<"$out" || die "as the ServiceAccount, get secret $NS/$SECRET: expected NotFound (allowed, absent), got: $out"
out=$(ksa -n kube-system get secrets 2>&1) && die "as the ServiceAccount, kubectl get secrets -n kube-system succeeded"
grep -q Forbidden <<<"$out" || die "expected Forbidden, got: $out"
pass "requests with the token: SidecarSets, namespaces, pods listed; its Secret reachable; kube-system Secrets Forbidden"

# Simulate the operator's caBundle write: server-side apply of only caBundle, with its field
# manager and its identity.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=chart-test-ca" \
  -keyout "$OUT/ca.key" -out "$OUT/ca.crt" 2>/dev/null || die "openssl could not make a CA"
CA_B64=$(base64 -w0 <"$OUT/ca.crt")
rm -f "$OUT/ca.key"
cat >"$OUT/cabundle.yaml" <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: $CFG
webhooks:
  - name: mpod.sidecarset-operator.io
    clientConfig:
      caBundle: $CA_B64
  - name: mpod-update.sidecarset-operator.io
    clientConfig:
      caBundle: $CA_B64
  - name: msidecarset.sidecarset-operator.io
    clientConfig:
      caBundle: $CA_B64
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $CFG
webhooks:
  - name: vsidecarset.sidecarset-operator.io
    clientConfig:
      caBundle: $CA_B64
EOF
out=$(ksa apply --server-side --field-manager="$FIELD_MANAGER" -f "$OUT/cabundle.yaml" 2>&1) \
  || die "as the ServiceAccount, server-side apply of caBundle failed: $out"
ca_all() {
  printf '%s %s' "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[*].clientConfig.caBundle}')" \
    "$(jpath validatingwebhookconfiguration "$CFG" '{.webhooks[*].clientConfig.caBundle}')"
}
expect_eq "caBundle written by server-side apply as the ServiceAccount (field manager $FIELD_MANAGER)" "$(ca_all)" "$CA_B64 $CA_B64 $CA_B64 $CA_B64"

# The same write on a configuration that is not the chart's is refused.
k apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $FOREIGN_VWC
webhooks: []
EOF
out=$(printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: %s\n  labels:\n    hijacked: "true"\n' "$FOREIGN_VWC" \
  | ksa apply --server-side --field-manager="$FIELD_MANAGER" -f - 2>&1) && die "as the ServiceAccount, patching $FOREIGN_VWC succeeded"
grep -q Forbidden <<<"$out" || die "expected Forbidden when patching $FOREIGN_VWC, got: $out"
k delete validatingwebhookconfiguration "$FOREIGN_VWC" >/dev/null
pass "server-side apply on another webhook configuration: Forbidden"

# A rule removed breaks something specific: without the namespaces rule, the operator can no
# longer list namespaces (its namespaceSelector index would stay empty).
rule_json=$(k get clusterrole "$FULLNAME" -o json | python3 -c '
import json, sys
rules = json.load(sys.stdin)["rules"]
i = [i for i, r in enumerate(rules) if r.get("resources") == ["namespaces"]][0]
print(i, json.dumps(rules[i]))')
idx=${rule_json%% *}
rule=${rule_json#* }
k patch clusterrole "$FULLNAME" --type=json -p "[{\"op\":\"remove\",\"path\":\"/rules/$idx\"}]" >/dev/null
sa_may_list_namespaces() { [ "$(ksa auth can-i list namespaces 2>/dev/null)" = "$1" ]; }
wait_until 15 "RBAC to deny listing namespaces" sa_may_list_namespaces no
out=$(ksa get namespaces 2>&1) && die "without the namespaces rule, the ServiceAccount still lists namespaces"
grep -q Forbidden <<<"$out" || die "expected Forbidden, got: $out"
pass "ClusterRole without its namespaces rule: list namespaces flips to Forbidden"
# Put it back as it was (same value at the same place: no field conflict for Helm 4's
# server-side apply later).
k patch clusterrole "$FULLNAME" --type=json -p "[{\"op\":\"add\",\"path\":\"/rules/$idx\",\"value\":$rule}]" >/dev/null
wait_until 15 "RBAC to allow listing namespaces again" sa_may_list_namespaces yes
ksa get namespaces >/dev/null || die "with the namespaces rule back, the ServiceAccount still cannot list namespaces"
pass "namespaces rule restored: list namespaces allowed again"

# ---------------------------------------------------------------------------------------------
section "5. helm upgrade keeps the operator's caBundle"

before=$(ca_all)
upgrade_out=$("$HELM" upgrade "$RELEASE" "$CHART" -n "$NS" --set webhook.timeoutSeconds=4 \
  -f "$CHART/ci/failure-policy-ignore-values.yaml" -f "$CHART/ci/extra-namespaces-values.yaml" \
  --wait --timeout "${TIMEOUT}s" 2>&1) || { printf '%s\n' "$upgrade_out" >&2; die "helm upgrade failed"; }
expect_eq "helm upgrade: revision 2 deployed" \
  "$("$HELM" status "$RELEASE" -n "$NS" -o json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["version"], d["info"]["status"])')" "2 deployed"
expect_eq "upgrade applied: pod webhook failurePolicy Ignore, timeout 4" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[0].failurePolicy} {.webhooks[0].timeoutSeconds}')" "Ignore 4"
expect_eq "upgrade applied: namespaceSelector has the extra namespaces" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[0].namespaceSelector.matchExpressions[0].values}')" \
  "[\"$NS\",\"kube-system\",\"kube-node-lease\",\"monitoring\"]"
grep -qF -- '"--skip-namespaces=kube-system,kube-node-lease,monitoring"' <<<"$(jpath deployment "$FULLNAME" '{.spec.template.spec.containers[0].args}' -n "$NS")" \
  || die "upgrade did not reach the Deployment's --skip-namespaces"
pass "upgrade applied: Deployment --skip-namespaces=kube-system,kube-node-lease,monitoring"
expect_eq "caBundle of all the webhooks unchanged by helm upgrade" "$(ca_all)" "$before"
expect_eq "helm upgrade keeps the match condition the operator wrote" \
  "$(jpath mutatingwebhookconfiguration "$CFG" '{.webhooks[0].matchConditions[*].name}={.webhooks[0].matchConditions[*].expression}')" \
  "selected-by-a-sidecarset=true"
k get mutatingwebhookconfiguration "$CFG" -o json --show-managed-fields >"$OUT/mwc.json"
owner=$(python3 -c '
import json, sys
mf = json.load(open(sys.argv[1]))["metadata"]["managedFields"]
print(",".join(sorted(m["manager"] for m in mf if "caBundle" in json.dumps(m.get("fieldsV1", {})))))' "$OUT/mwc.json")
managers=$(python3 -c '
import json, sys
mf = json.load(open(sys.argv[1]))["metadata"]["managedFields"]
print(", ".join("%s (%s)" % (m["manager"], m["operation"]) for m in mf))' "$OUT/mwc.json")
expect_eq "caBundle still owned by field manager $FIELD_MANAGER only (managers: $managers)" "$owner" "$FIELD_MANAGER"
out=$(probe_pod default sso-probe) || die "with failurePolicy Ignore, a pod in default should be admitted although no operator answers: $out"
pass "admission after upgrade: failurePolicy Ignore admits pods while no operator answers"

# The CRD upgrade story (README): Helm never upgrades crds/, the user applies it server-side.
# --force-conflicts is needed because Helm created the CRD (its fields belong to manager "helm").
python3 -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
s = d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
s["description"] = s.get("description", "") + " (chart-test)"
yaml.safe_dump(d, open(sys.argv[2], "w"), sort_keys=False)' "$CHART/crds/$CRD_NAME.yaml" "$OUT/crd-newer.yaml"
crd_desc() { jpath crd "$CRD_NAME" '{.spec.versions[0].schema.openAPIV3Schema.description}'; }
out=$(k apply --server-side --force-conflicts -f "$OUT/crd-newer.yaml" 2>&1) || die "the documented CRD upgrade (kubectl apply --server-side --force-conflicts) failed: $out"
[[ $(crd_desc) == *"(chart-test)" ]] || die "the CRD upgrade did not change the CRD"
out=$(k apply --server-side --force-conflicts -f "$CHART/crds/" 2>&1) || die "re-applying the chart's CRD failed: $out"
[[ $(crd_desc) != *"(chart-test)" ]] || die "re-applying the chart's CRD did not restore it"
pass "CRD upgrade as documented: kubectl apply --server-side --force-conflicts -f crds/ changes the installed CRD"

# ---------------------------------------------------------------------------------------------
section "6. helm uninstall removes everything but the CRD"

"$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout "${TIMEOUT}s" >/dev/null || die "helm uninstall failed"
INSTALLED=0
sel="app.kubernetes.io/instance=$RELEASE"
left=$(k -n "$NS" get deployment,replicaset,service,serviceaccount,role,rolebinding,poddisruptionbudget,secret,configmap -l "$sel" -o name 2>&1)
left+=$(k get clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration -l "$sel" -o name 2>&1)
for obj in "mutatingwebhookconfiguration/$CFG" "validatingwebhookconfiguration/$CFG" "clusterrole/$FULLNAME" "clusterrolebinding/$FULLNAME"; do
  if k get "$obj" >/dev/null 2>&1; then left+=" $obj"; fi
done
for obj in "deployment/$FULLNAME" "serviceaccount/$SA" "role/$FULLNAME" "service/$FULLNAME-webhook" "poddisruptionbudget/$FULLNAME"; do
  if k -n "$NS" get "$obj" >/dev/null 2>&1; then left+=" $obj"; fi
done
[ -z "$(tr -d ' ' <<<"$left")" ] || die "helm uninstall left objects behind: $left"
pass "helm uninstall: no Deployment, Service, ServiceAccount, RBAC, PDB or webhook configuration left"
no_operator_pods() { [ -z "$(k -n "$NS" get pods -l "$sel" -o name 2>/dev/null)" ]; }
wait_until 60 "the operator pods to go away" no_operator_pods
pass "helm uninstall: operator pods gone"
k get crd "$CRD_NAME" >/dev/null 2>&1 || die "helm uninstall removed the CRD $CRD_NAME (it must stay, with every SidecarSet)"
pass "helm uninstall: CRD $CRD_NAME kept (documented in the chart README)"

# ---------------------------------------------------------------------------------------------
if [ "${SSO_CHART_TEST_RELEASE:-1}" = 1 ]; then release_phase; fi

# ---------------------------------------------------------------------------------------------
DONE=1
CURRENT=
printf '%s\n' "${PASSED[@]}" >"$OUT/checks.txt"
printf '\n[chart-test] ==== summary: %d checks passed (list: %s)\n' "${#PASSED[@]}" "$OUT/checks.txt" >&2
for s in "${SECTIONS[@]}"; do printf '  %4d  %s\n' "${SECTION_CHECKS[$s]}" "$s" >&2; done
if [ ${#SKIPPED_KINDS[@]} -gt 0 ]; then
  printf '\n[chart-test] left out of the dry runs (their CRDs are not installed on this cluster):\n' >&2
  printf '  %s\n' "${SKIPPED_KINDS[@]}" >&2
fi
printf '\n[chart-test] PASSED: chart %s, release %s in %s\n' "$(sed -n 's/^version: //p' "$CHART/Chart.yaml")" "$RELEASE" "$NS" >&2
