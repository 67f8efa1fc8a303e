# Self-documenting: every public target has a '## ' description; `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

# Every package comes from requirements-dev.lock, hashes checked, so a fresh machine runs what CI ran;
# the project itself is then installed in place without resolving anything (hack/lock-dev.sh re-pins).
$(STAMP): pyproject.toml requirements-dev.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-dev.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: venv
venv: $(STAMP) ## Create the virtual environment with the project and its dev tools

.PHONY: kube-bin
kube-bin: ## Build (or reuse) the pinned etcd, kube-apiserver, controller-manager, scheduler, kubectl and helm
	@bash hack/build-kube.sh >/dev/null

.PHONY: prometheus
prometheus: ## Install Debian's prometheus and promtool if missing (exporter tests)
	@bash hack/install-prometheus.sh >/dev/null

.PHONY: containerd-bin
containerd-bin: ## Install Debian's containerd, runc and busybox-static when missing (toolkit integration test)
	@bash hack/install-containerd.sh >/dev/null

.PHONY: node-bin
node-bin: ## Build (or reuse) kubelet, containerd, ctr, the runc shim and pause for real nodes; install runc, CNI plugins, iptables
	@bash hack/build-node.sh >/dev/null
	@bash hack/install-node-deps.sh >/dev/null

.PHONY: nfd-bin
nfd-bin: ## Build (or reuse) Node Feature Discovery (nfd-master, nfd-worker, its chart) for the e2e tier
	@bash hack/build-nfd.sh >/dev/null

.PHONY: generate
generate: $(STAMP) ## Regenerate CRDs, gRPC stubs and other files generated from code
	$(BIN)/gpu-operator crds --output-dir deploy/crds
	$(BIN)/python hack/generate.py
	PATH="$(CURDIR)/$(BIN):$$PATH" bash hack/gen-proto.sh

.PHONY: lint
lint: $(STAMP) ## ruff (lint + format check), mypy --strict, import-linter
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: fmt
fmt: $(STAMP) ## Format the code and apply safe lint fixes
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

.PHONY: test
#: The tiers that run on every core (pytest-xdist): no cluster, no host state, only temporary files and
#: ports of their own. The others follow in one process: they share a control plane, real nodes or a GPU.
#: PYTEST_ARGS go to both runs: select with -k or -m, not with paths.
FAST_TIERS := tests/unit tests/golden tests/contract
SLOW_TIERS := tests/gpu tests/e2e tests/integration tests/chaos

test: $(STAMP) kube-bin node-bin nfd-bin prometheus containerd-bin lint ## Lint, type-check and run every test tier this machine can run
	@# pytest exits 5 when it collects nothing: not a failure of the build. The e2e tier builds (or reuses) the image.
	@# The second run adds its times to the first's (tests/timing.py), so the last table covers both.
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" GPU_OPERATOR_NODE_BIN_DIR="$$(bash hack/build-node.sh)"; \
	  export GPU_OPERATOR_KUBE_BIN_DIR GPU_OPERATOR_NODE_BIN_DIR; \
	  $(BIN)/pytest -n auto $(FAST_TIERS) $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests in the fast tiers"; rc=0; fi; \
	  if [ $$rc -ne 0 ]; then exit $$rc; fi; \
	  GPU_OPERATOR_TEST_TIMES_CONTINUE=1 $(BIN)/pytest $(SLOW_TIERS) $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests in the other tiers"; rc=0; fi; exit $$rc

.PHONY: test-unit
test-unit: $(STAMP) prometheus ## Only the fast tiers: unit (no sockets, 2 s a test) and golden, on every core
	$(BIN)/pytest -n auto tests/unit tests/golden $(PYTEST_ARGS)

.PHONY: test-contract
test-contract: $(STAMP) ## The contract tier: fake driver and NVML, gRPC and HTTP servers on local sockets
	$(BIN)/pytest -n auto tests/contract $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: $(STAMP) kube-bin node-bin nfd-bin prometheus containerd-bin ## Only the integration tier: one real control plane for the run
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" GPU_OPERATOR_NODE_BIN_DIR="$$(bash hack/build-node.sh)" \
	  $(BIN)/pytest tests/integration $(PYTEST_ARGS)

.PHONY: test-e2e
test-e2e: $(STAMP) kube-bin node-bin nfd-bin prometheus containerd-bin ## Only the e2e tier: real kubelet nodes running the product image
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" GPU_OPERATOR_NODE_BIN_DIR="$$(bash hack/build-node.sh)" \
	  $(BIN)/pytest tests/e2e $(PYTEST_ARGS)

.PHONY: golden
golden: $(STAMP) prometheus ## Regenerate the golden files (review the diff before committing)
	GPU_OPERATOR_UPDATE_GOLDEN=1 $(BIN)/pytest tests/golden $(PYTEST_ARGS)

.PHONY: bench
bench: $(STAMP) kube-bin ## Run the benchmarks and write BENCHMARKS.md
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" $(BIN)/python bench/run.py --output BENCHMARKS.md

.PHONY: reliability
reliability: $(STAMP) kube-bin node-bin containerd-bin ## Property tests (1,000 cases each) and the chaos tier (120 s outages); write RELIABILITY.md
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" GPU_OPERATOR_NODE_BIN_DIR="$$(bash hack/build-node.sh)" \
	  $(BIN)/python hack/reliability.py --examples $${EXAMPLES:-1000} --outage $${OUTAGE:-120}

.PHONY: chaos
chaos: $(STAMP) kube-bin ## Only the chaos tier, with 120 s API server and etcd outages (figures in build/chaos)
	rm -f build/chaos/results.json
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" CHAOS_OUTAGE_SECONDS=$${OUTAGE:-120} \
	  $(BIN)/pytest tests/chaos $(PYTEST_ARGS)

.PHONY: demo
demo: $(STAMP) kube-bin ## The main job: the operator on an embedded local cluster
	GPU_OPERATOR_KUBE_BIN_DIR="$$(bash hack/build-kube.sh)" $(BIN)/gpu-operator demo $(DEMO_ARGS)

.PHONY: image
image: $(STAMP) ## Build the image as build/image/gpu-operator.oci.tar without a container engine (hack/image/build.py)
	$(BIN)/python hack/image/build.py

.PHONY: lock
lock: ## Re-pin the development environment (requirements-dev.lock) after a dependency change
	bash hack/lock-dev.sh

.PHONY: image-lock
image-lock: $(STAMP) ## Re-pin the image's Debian packages and Python wheels (hack/image/*.lock)
	$(BIN)/python hack/image/build.py --refresh-lock

.PHONY: clean
clean: ## Remove the virtual environment and caches (the cached Kubernetes binaries are kept)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build src/*.egg-info
