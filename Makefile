# Strata developer entry points. On a fresh Debian 12 machine, as root:
#   make run    # install deps, build, start a local PS and benchmark it
#   make test   # install deps, build (gcc and clang -Wthread-safety), test
#
# Variables: JOBS (parallel build jobs, default: nproc).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
# Targets run in the order given (test = deps, build, build-tsa, ctest).
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

.PHONY: all deps build build-tsa test bench run clean

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

# clang-14 with -Wthread-safety (warnings are errors) over all targets.
build-tsa: deps
	cmake -S . -B $(TSA_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DSTRATA_THREAD_SAFETY=ON -DSTRATA_WITH_CUDA=OFF
	cmake --build $(TSA_DIR) -j$(JOBS)

test: deps build build-tsa
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j2 --timeout 300

bench: build
	$(BUILD_DIR)/bin/ps_bench --markdown bench/RESULTS.latest.md
	@echo "bench: results written to bench/RESULTS.latest.md"

run: build
	tools/run_local.sh

clean:
	rm -rf $(BUILD_DIR) $(TSA_DIR)
