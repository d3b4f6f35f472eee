# sidecarset-operator — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN        := target/debug/sidecarset-operator
CRD_FILES  := charts/sidecarset-operator/crds/sidecarsets.apps.kruise.io.yaml \
              bundle/manifests/apps.kruise.io_sidecarsets.yaml
CLI_REF    := docs/src/reference/cli.md
IMG        ?= sidecarset-operator:dev

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the operator (debug)
	cargo build --bin sidecarset-operator

.PHONY: test
test: ## Every test: lint, feature and generated-file drift, unit + webhook tests, chart and bundle checks, e2e on local clusters and on a real node; ends with a table of the phases' times (hack/test.sh)
	hack/test.sh all

.PHONY: check
check: ## The fast inner loop (no cluster): fmt, shellcheck, the feature check, clippy, generated-file drift, the docs site and its links, unit/fixture/conformance/webhook tests, chart lint
	hack/test.sh check

.PHONY: unit
unit: ## Unit, fixture and webhook (TLS) tests (and the e2e crate's own unit tests: its harnesses' pure parts)
	cargo test --workspace --exclude sidecarset-e2e --tests
	cargo test -p sidecarset-e2e --lib

.PHONY: fuzz
fuzz: ## Long property runs (PROPTEST_CASES, default 100000) of AdmissionReview decoding + admission, injection and conversion
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} cargo test -p sidecarset-operator --test all -- --test-threads=2 properties:: conversion::

.PHONY: e2e-local
e2e-local: ## The e2e suite on a local kwok cluster built from source (operator as a local process)
	hack/e2e-local.sh

.PHONY: test-faults
test-faults: ## The fault harness (crash after each write; relist after, drop or coalesce each Pod event) on every point of the five reference scenarios, on a local kwok cluster of its own (hack/faults.sh sweep; make test runs a sample); a failure prints its replay command
	hack/faults.sh sweep

.PHONY: test-inputs
test-inputs: ## The input harness (Acto-style): 23 sequences of 12 SidecarSet changes derived from the CRD's schema, valid and invalid, on a local kwok cluster of its own (hack/faults.sh inputs-sweep; make test runs one short sequence); a failure prints its replay command
	hack/faults.sh inputs-sweep

.PHONY: e2e-node
e2e-node: ## Real-node suites: operator image, helm install and in-place upgrades on a real kubelet (hack/node.sh; needs root; skipped with the reason where it cannot run, unless CI / SSO_REQUIRE_REAL_NODE=1)
	hack/e2e-node.sh

.PHONY: e2e-olm
e2e-olm: ## The bundle installed, upgraded and removed by OLM (built from its Go module) on the real node, from a registry and catalog on the machine (hack/e2e-olm.sh; needs root)
	hack/e2e-olm.sh

.PHONY: node-up
node-up: ## Start the real node (kubelet + containerd) and its control plane: hack/node.sh up
	hack/node.sh up

.PHONY: node-down
node-down: ## Stop the real node: hack/node.sh down
	hack/node.sh down

.PHONY: e2e
e2e: ## The e2e suite on kind with the operator image installed by Helm (needs Docker and kind)
	hack/e2e-kind.sh

.PHONY: e2e-kind-local
e2e-kind-local: ## make e2e on this machine without a registry: Debian's dockerd in a private network namespace, kind and its node image built here (hack/kind-docker.sh, hack/kind-node.sh; needs root; not part of make test)
	SSO_KIND_LOCAL=1 hack/e2e-kind.sh

.PHONY: shellcheck
shellcheck: ## shellcheck on every script of hack/ and .ci/run (installs Debian's shellcheck when missing and root)
	hack/shellcheck.sh

.PHONY: lint
lint: ## cargo fmt --check, one feature set for every build (hack/features.sh), clippy -D warnings
	cargo fmt --all -- --check
	hack/features.sh check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: manifests
manifests: ## Write the generated CRD into the chart and the bundle, the chart README's values table (helm-docs) and the docs' command-line reference
	cargo build -q --bin sidecarset-operator
	@for f in $(CRD_FILES); do mkdir -p $$(dirname $$f); $(BIN) crd > $$f; echo "wrote $$f"; done
	@$(BIN) reference-cli > $(CLI_REF); echo "wrote $(CLI_REF)"
	hack/chart-docs.sh generate

.PHONY: check-manifests
check-manifests: ## Fail when the generated manifests differ from the code (run `make manifests`)
	cargo build -q --bin sidecarset-operator
	@for f in $(CRD_FILES); do \
	  if ! $(BIN) crd | diff -q - $$f >/dev/null; then \
	    echo "$$f is out of date with crates/core/src/api: run 'make manifests' and commit the result"; exit 1; fi; done
	@if ! $(BIN) reference-cli | diff -u $(CLI_REF) - >&2; then \
	  echo "$(CLI_REF) is out of date with the command line's definitions: run 'make manifests' and commit the result"; exit 1; fi
	@hack/chart-docs.sh check
	@echo "generated manifests are up to date"

.PHONY: docs
docs: ## Build the documentation site (docs/, mdBook at a pinned version, installed into ~/.cache/sidecarset-operator) into target/docs
	hack/docs.sh build

.PHONY: pictures
pictures: ## Draw the docs site's pictures (docs/src/pictures/*.svg) with hack/pictures.py; hack/record-rollout.py records the rollout's figures, hack/record-dashboard.py the dashboard's (a Prometheus on the local cluster)
	python3 hack/pictures.py write

.PHONY: docs-check
docs-check: ## Build the site and check its links and anchors, and the README's size and install block (a phase of make check)
	hack/docs.sh check

.PHONY: run
run: build ## Run the operator locally against the current KUBECONFIG (webhooks by URL)
	hack/run-local.sh

.PHONY: demo
demo: ## Local cluster + operator + sample SidecarSet and Deployment; prints the injected pod
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Clean up what `make demo` started
	hack/demo.sh down

.PHONY: cluster-up
cluster-up: ## Start the local kwok cluster (kubeconfig: .local/kubeconfig)
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Delete the local kwok cluster
	hack/cluster.sh down

.PHONY: tools
tools: ## Build the test tools (kube-apiserver, etcd, kwok, helm, kubelet) into ~/.cache/sidecarset-operator
	hack/tools.sh all kubelet

.PHONY: bench
bench: ## Benchmarks: injection core (criterion) and a webhook load run over TLS (in-process client, then wrk at 8 and 1 connections when installed)
	cargo bench --bench inject
	cargo bench --bench webhook_load

.PHONY: bench-tracing
bench-tracing: ## Webhook load runs, 3 rounds of: telemetry off, logs only, logs + OTLP traces
	cargo bench --no-run --bench webhook_load
	for round in 1 2 3; do for mode in off logs otlp; do \
	  SSO_BENCH_TRACING=$$mode cargo bench -q --bench webhook_load 2>/dev/null; done; done

.PHONY: bench-policy
bench-policy: ## Pod creation through the API server (own local cluster): no injector, a one-annotation policy (the floor), the MutatingAdmissionPolicy (--injection=auto, operator stopped), the webhook; 1, 10, 100 SidecarSets; p50/p99 and creations/s
	hack/bench-policy.sh

.PHONY: bench-sim
bench-sim: ## Simulation of 100000 pods and 5000 SidecarSets in one process (no API server): memory per pod and per SidecarSet, per-event and per-reconcile cost, relist peak (knobs: SSO_SIM_PODS, SSO_SIM_SIDECARSETS, SSO_SIM_NAMESPACES)
	cargo bench --bench simulate

.PHONY: bench-controller
bench-controller: ## Controller load run on a local kwok cluster: PODS matched pods (default 5000)
	hack/bench-controller.sh

.PHONY: bench-scale
bench-scale: ## Scale benchmark on a local kwok cluster: 20000 pods, 1000 SidecarSets; RSS, idle CPU/reconciles, convergence, rollout rate, admission p50/p99 (wrk); knobs in hack/bench-scale.sh
	hack/bench-scale.sh

.PHONY: docker-build
docker-build: ## Build the operator image (needs Docker)
	docker build -t $(IMG) .

# ---- Packaging: Helm chart and OLM bundle --------------------------------------------------------
CHART          := charts/sidecarset-operator
HELM_RELEASE   ?= sidecarset-operator
HELM_NAMESPACE ?= sidecarset-system
HELM_ARGS      ?=
KIND_CLUSTER   ?= sidecarset-e2e

.PHONY: helm-lint
helm-lint: ## helm lint --strict + template of the chart with default and ci/ values (no cluster)
	hack/chart-test.sh lint

.PHONY: chart-test
chart-test: ## Chart against the KUBECONFIG cluster: dry runs, install, RBAC as its ServiceAccount, upgrade, uninstall
	@[ -n "$${KUBECONFIG:-}" ] || { echo "chart-test needs KUBECONFIG (make cluster-up; eval \"\$$(hack/cluster.sh env)\"), or run 'make chart-test-local'"; exit 1; }
	hack/chart-test.sh

.PHONY: chart-test-local
chart-test-local: ## chart-test on its own local kwok cluster (started and deleted by it)
	hack/chart-test.sh --with-cluster

.PHONY: bundle
bundle: ## Regenerate the OLM bundle (bundle/, bundle.Dockerfile) from the chart and the code
	hack/bundle.sh generate

.PHONY: bundle-check
bundle-check: ## Fail when bundle/ differs from the chart and the code (run `make bundle`)
	hack/bundle.sh check

.PHONY: bundle-validate
bundle-validate: bundle-check ## operator-sdk bundle validate (suite=operatorframework) and opm render on ./bundle
	hack/bundle.sh validate

.PHONY: bundle-build
bundle-build: ## Build the bundle image (needs Docker; BUNDLE_IMG)
	docker build -f bundle.Dockerfile -t $${BUNDLE_IMG:-sidecarset-operator-bundle:v$$(sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' $(CHART)/Chart.yaml)} .

.PHONY: release
release: ## The signed release into dist/ (RELEASE_DIR; keys COSIGN_KEY + COSIGN_PASSWORD, HELM_SIGN_KEY): chart archive + Helm provenance pushed as OCI (CHART_REPO, default the registry on this machine), image OCI archive + digest, both signed by digest with cosign, SBOM and SLSA provenance attested, Krew archive + manifest, release notes, SHA256SUMS; refuses a dirty tree unless ALLOW_DIRTY=1 (hack/release.sh)
	hack/release.sh

.PHONY: release-verify
release-verify: ## Check a release directory (RELEASE_DIR, default dist) with the public keys (COSIGN_PUB, HELM_KEYRING): checksums, Krew sha256, image and chart digests, signatures, attestations, Helm provenance, the binary's dependency list
	hack/release.sh verify $${RELEASE_DIR:-dist}

.PHONY: release-reproduce
release-reproduce: ## Build the release binary of HEAD twice in two directories and its image from each: both must be identical (hack/release.sh reproduce)
	hack/release.sh reproduce $${SSO_WORK:-.local}/reproduce/out

.PHONY: deps
deps: ## The dependency policy (deny.toml) with cargo-deny offline: licenses, duplicate versions, sources, RustSec advisories of the snapshot in hack/advisory-db (a phase of make check)
	hack/deps.sh check

.PHONY: deploy
deploy: ## Install or upgrade the chart in the current kube context (IMG, HELM_NAMESPACE, HELM_ARGS)
	@img='$(IMG)'; name=$${img##*/}; \
	if [[ $$img == *@* ]]; then set -- --set "image.repository=$${img%@*}" --set "image.digest=$${img#*@}"; \
	elif [[ $$name == *:* ]]; then set -- --set "image.repository=$${img%:*}" --set "image.tag=$${img##*:}"; \
	else set -- --set "image.repository=$$img"; fi; \
	eval "$$(hack/tools.sh helm)"; \
	echo "applying the CRD (Helm never upgrades crds/)"; \
	kubectl apply --server-side --force-conflicts -f $(CHART)/crds/; \
	set -x; "$$HELM_BIN/helm" upgrade --install $(HELM_RELEASE) $(CHART) -n $(HELM_NAMESPACE) --create-namespace \
	  "$$@" --wait --timeout 5m $(HELM_ARGS)

.PHONY: undeploy
undeploy: ## Uninstall the chart from the current kube context (the CRD and its SidecarSets stay)
	@eval "$$(hack/tools.sh helm)"; "$$HELM_BIN/helm" uninstall $(HELM_RELEASE) -n $(HELM_NAMESPACE) --wait
	@echo "the SidecarSet CRD is kept; remove it with: kubectl delete crd sidecarsets.apps.kruise.io (deletes every SidecarSet)"

.PHONY: kind-load
kind-load: ## Load the operator image IMG into the kind cluster KIND_CLUSTER (needs Docker and kind)
	@command -v kind >/dev/null || { echo "kind-load needs kind (and Docker)"; exit 1; }
	kind load docker-image $(IMG) --name $(KIND_CLUSTER)
