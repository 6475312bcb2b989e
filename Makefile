# Strata developer entry points. On a fresh Debian 12 machine, as root:
#   make run    # install deps, build, train the reference job on a local cluster
#   make test   # install deps, build (gcc and clang -Wthread-safety), test
#
# Variables: JOBS (parallel build jobs, default: nproc).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
# Targets run in the order given (test = deps, deploy-deps, build,
# build-tsa, ctest).
.NOTPARALLEL:

JOBS ?= $(shell nproc)
BUILD_DIR := build
TSA_DIR := build-tsa

# Debian 12 packages the build, tests and tools need. (prometheus-cpp is not
# packaged in Debian 12; metrics are written in-tree.)
DEB_PACKAGES := \
  build-essential cmake pkg-config ccache clang-14 \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev libeigen3-dev \
  libcpp-httplib-dev libgoogle-perftools-dev dataset-fashion-mnist \
  iproute2 procps

.PHONY: all deps build build-tsa test bench run ps-smoke train-compare strategies clean

all: build

# Installs only the missing packages; does nothing (no apt-get) when all are
# present.
deps:
	@command -v dpkg-query >/dev/null || \
	  { echo "deps: dpkg-query not found; this targets Debian 12" >&2; exit 1; }
	@missing=""; \
	for pkg in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null \
	    | grep -q 'install ok installed' || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null; then sudo="sudo"; \
	else \
	  echo "deps: missing packages:$$missing" >&2; \
	  echo "deps: run 'make deps' as root (sudo is not installed)" >&2; \
	  exit 1; \
	fi; \
	echo "deps: installing$$missing"; \
	$$sudo apt-get update -qq; \
	$$sudo env DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends $$missing

build: deps
	cmake -S . -B $(BUILD_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD_DIR) -j$(JOBS)

# clang-14 with -Wthread-safety (warnings are errors) over the project's
# libraries and daemons, where the lock annotations are (the tests are built
# by gcc in `build`; this keeps `make test` well inside CI's time).
TSA_TARGETS := strata_common strata_proto strata_kernels strata_strategies \
  strata_server strata_client strata_coordinator strata_worker_core \
  strata_worker strata_tools strata_sdk strata-ps strata-coordinator \
  strata-worker strata ps_bench
build-tsa: deps
	cmake -S . -B $(TSA_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DSTRATA_THREAD_SAFETY=ON -DSTRATA_WITH_CUDA=OFF
	cmake --build $(TSA_DIR) -j$(JOBS) --target $(TSA_TARGETS)

test: deps deploy-deps build build-tsa
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j2 --timeout 300

bench: build
	$(BUILD_DIR)/bin/ps_bench --markdown bench/RESULTS.latest.md
	@echo "bench: results written to bench/RESULTS.latest.md"

# Trains the reference job (examples/fashion_mnist/job.json) on a local
# cluster: a coordinator, 2 PS tasks and 2 workers as processes.
run: build
	$(BUILD_DIR)/bin/strata launch --job examples/fashion_mnist/job.json \
	  --ps 2 --workers 2 --summary $(BUILD_DIR)/run-summary.json
	@echo "run: summary written to $(BUILD_DIR)/run-summary.json"

# Every strategy on the reference job beside the single-process run.
strategies: build
	bench/strategies.sh

# One PS and the quick data-plane benchmark against it, then SIGTERM.
ps-smoke: build
	tools/run_local.sh

# Single-process training against the PS strategy, side by side.
train-compare: build
	bench/train_compare.sh

# ---- Deployment (deploy/) ----
.PHONY: deploy-deps deploy-check

# Node.js and npm for the deployment checks, from apt only when `node` or
# `npm` is missing (Debian 12: nodejs, npm; a NodeSource nodejs already
# brings npm, and the Debian npm package would conflict with it).
deploy-deps:
	@if command -v node >/dev/null && command -v npm >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null; then sudo="sudo"; \
	else \
	  echo "deploy-deps: node or npm is missing; run 'make deploy-deps' as root" >&2; \
	  exit 1; \
	fi; \
	echo "deploy-deps: installing nodejs npm"; \
	$$sudo apt-get update -qq; \
	$$sudo env DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends nodejs npm

# Renders every overlay and the TFJob with `kubectl kustomize` (into
# build/deploy/) and checks them offline: schema (kubernetes-types through
# the TypeScript compiler, pinned by deploy/validate/package-lock.json and
# installed with npm ci on first use), policy, Dockerfile; then each broken
# fixture must fail its layer. ctest runs the same as deploy_validate.
deploy-check: deploy-deps
	deploy/validate/check.sh --out $(BUILD_DIR)/deploy
	node --test tests/deploy_validate_test.js

clean:
	rm -rf $(BUILD_DIR) $(TSA_DIR)
