# sidecarset-operator — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN        := target/debug/sidecarset-operator
CRD_FILES  := charts/sidecarset-operator/crds/sidecarsets.apps.kruise.io.yaml \
              bundle/manifests/apps.kruise.io_sidecarsets.yaml
IMG        ?= sidecarset-operator:dev

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the operator (debug)
	cargo build --bin sidecarset-operator

.PHONY: test
test: lint check-manifests unit e2e-local ## Every test: lint, manifest drift, unit + webhook tests, e2e on a local cluster

.PHONY: unit
unit: ## Unit, fixture and webhook (TLS) tests
	cargo test --workspace --exclude sidecarset-e2e

.PHONY: e2e-local
e2e-local: ## The e2e suite on a local kwok cluster built from source (operator as a local process)
	hack/e2e-local.sh

.PHONY: e2e
e2e: ## The e2e suite on kind with the operator image installed by Helm (needs Docker and kind)
	hack/e2e-kind.sh

.PHONY: lint
lint: ## cargo fmt --check and clippy -D warnings
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: manifests
manifests: ## Write the generated CRD into the chart and the bundle
	cargo build -q --bin sidecarset-operator
	@for f in $(CRD_FILES); do mkdir -p $$(dirname $$f); $(BIN) crd > $$f; echo "wrote $$f"; done

.PHONY: check-manifests
check-manifests: ## Fail when the generated manifests differ from the code (run `make manifests`)
	cargo build -q --bin sidecarset-operator
	@for f in $(CRD_FILES); do \
	  if ! $(BIN) crd | diff -q - $$f >/dev/null; then \
	    echo "$$f is out of date with src/api: run 'make manifests' and commit the result"; exit 1; fi; done
	@echo "generated manifests are up to date"

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
tools: ## Build the test tools (kube-apiserver, etcd, kwok, helm) into ~/.cache/sidecarset-operator
	hack/tools.sh all

.PHONY: bench
bench: ## Benchmarks: injection core (criterion) and a webhook load run over TLS
	cargo bench --bench inject
	cargo bench --bench webhook_load

.PHONY: docker-build
docker-build: ## Build the operator image (needs Docker)
	docker build -t $(IMG) .
