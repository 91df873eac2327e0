# banlieue's Makefile, with kubebuilder's target names. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

CONTROLLER_GEN = $(shell bash hack/tool.sh controller-gen)
GOLANGCI_LINT = $(shell bash hack/tool.sh golangci-lint)
# The envtest assets folder is the last line hack/envtest.sh prints.
ENVTEST_ASSETS = $(shell bash hack/envtest.sh | tail -n 1)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC from the Go types and markers.
	$(CONTROLLER_GEN) object paths=./api/... paths=./test/provider/api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd/bases
	$(CONTROLLER_GEN) crd paths=./test/provider/api/... output:crd:dir=test/provider/config/crd
	$(CONTROLLER_GEN) rbac:roleName=banlieue-controller paths=./internal/controller/... output:rbac:dir=config/rbac

.PHONY: verify
verify: generate ## Fail when generated files are stale (run `make generate` and commit).
	@if ! git diff --quiet -- api config test/provider || [ -n "$$(git ls-files --others --exclude-standard -- api config test/provider)" ]; then \
		echo "Generated files are stale; run 'make generate' and commit the result:"; \
		git status --short -- api config test/provider; exit 1; fi

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver, etcd and kubectl from source (cached); prints their folder last.
	@bash hack/envtest.sh

##@ Test

.PHONY: deps
deps: ## Install the Debian packages the tests need (as root, when missing).
	@bash hack/deps.sh

.PHONY: test
test: deps verify vet lint ## Run the whole test suite, with a real API server.
	@assets=$$(bash hack/envtest.sh | tail -n 1); \
	KUBEBUILDER_ASSETS=$$assets go test ./... -count=1 -timeout 30m

.PHONY: bench
bench: ## Run the benchmarks.
	go test ./... -run '^$$' -bench . -benchmem

##@ Build

.PHONY: build
build: ## Build bin/banlieue.
	go build -o bin/banlieue ./cmd/banlieue

.PHONY: dev
dev: build ## Run a local control plane with banlieue, ready for kubectl apply.
	@assets=$$(bash hack/envtest.sh | tail -n 1); \
	bin/banlieue dev --assets "$$assets"
