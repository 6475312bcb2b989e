# Strata developer entry points. On a fresh Debian 12 machine, as root:
#   make run    # install deps, build, train the reference job on a local cluster
#   make test   # install deps, build (gcc and clang -Wthread-safety), test
#
# Variables: JOBS (parallel build jobs, default: nproc).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
# Targets run in the order given (test = deps, deploy-deps, build,
# build-tsa, fuzz-build, ctest, a short run of each fuzz target).
.NOTPARALLEL:

JOBS ?= $(shell nproc)
BUILD_DIR := build
TSA_DIR := build-tsa
FUZZ_DIR := build-fuzz
ASAN_DIR := build-asan
TSAN_DIR := build-tsan

# Debian 12 packages the build, tests and tools need. (prometheus-cpp is not
# packaged in Debian 12; metrics are written in-tree.) The Python package
# (python/) builds on Debian's python3-dev, pybind11-dev and python3-numpy,
# and its tests run under python3-pytest (python3-torch for the PyTorch
# interop example). etcd-server (3.4) holds the state and leadership of
# replicated coordinators (strata-coordinator --etcd-endpoints, strata
# launch --ha); its tests start it as a real process. libopenblas0: Debian's
# torch runs on OpenBLAS instead of the reference BLAS (the PyTorch baseline
# of bench/cnn_compare.sh). python3-h5py: the weights file (model.weights.h5)
# of the .keras archives and .weights.h5 files the Python package saves.
DEB_PACKAGES := \
  build-essential cmake pkg-config ccache clang-14 libclang-rt-14-dev \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev libeigen3-dev \
  libcpp-httplib-dev libgoogle-perftools-dev dataset-fashion-mnist \
  iproute2 procps openssl etcd-server \
  python3-dev pybind11-dev python3-numpy python3-pytest python3-torch \
  python3-venv python3-pip python3-wheel libopenblas0 python3-h5py

.PHONY: all deps build build-tsa test bench bench-netns run ps-smoke train-compare async-accuracy criteo-compare cnn-compare guides recsys-compare model-strategies strategies chaos clean

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

# Line tables only (-g1): backtraces and debuggers keep file:line, and the
# build takes about a third less CPU than with full debug information (the
# test files, heavy with gtest templates, about half).
LINE_TABLES := -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
build: deps
	cmake -S . -B $(BUILD_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo $(LINE_TABLES)
	cmake --build $(BUILD_DIR) -j$(JOBS)

# clang-14 with -Wthread-safety (warnings are errors) over the project's
# libraries and daemons, where the lock annotations are (the tests are built
# by gcc in `build`; this keeps `make test` well inside CI's time). Only the
# diagnostics matter here: unoptimized and without debug information.
TSA_TARGETS := strata_common strata_proto strata_kernels strata_strategies strata_model \
  strata_job strata_server strata_client strata_collective strata_collective_grpc \
  strata_coordinator strata_worker_core \
  strata_worker strata_tools strata_sdk strata-ps strata-coordinator \
  strata-worker strata ps_bench
build-tsa: deps
	cmake -S . -B $(TSA_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -g0 -DNDEBUG" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g0 -DNDEBUG" \
	  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DSTRATA_THREAD_SAFETY=ON -DSTRATA_WITH_CUDA=OFF -DSTRATA_WITH_PYTHON=OFF
	cmake --build $(TSA_DIR) -j$(JOBS) --target $(TSA_TARGETS)

test: deps deploy-deps build build-tsa fuzz-build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j2 --timeout 300
	tests/fuzz/run_fuzz.sh $(FUZZ_DIR) $(FUZZ_TEST_SECONDS) $(FUZZ_TARGETS)

bench: build
	$(BUILD_DIR)/bin/ps_bench --markdown bench/RESULTS.latest.md
	@echo "bench: results written to bench/RESULTS.latest.md"

# The data-plane benchmark across two network namespaces joined by a veth
# pair (a real TCP stack, no shared memory), beside the loopback run, then
# training with the workers and the PS tasks on either side of it, then the
# ring all-reduce with its 2 ranks on either side; as root (each says so and
# skips otherwise). QUICK=1 for short data-plane and all-reduce runs.
bench-netns: build
	bench/netns_bench.sh
	bench/train_netns.sh
	bench/allreduce_netns.sh

# Every strategy under random kill -9 / SIGSTOP of every role for a whole
# run (tests/chaos_test.cc, longer than its short version in `make test`);
# the per-strategy table goes to bench/results/chaos.md.
CHAOS_EPOCHS ?= 6
CHAOS_FAULTS ?= 8
CHAOS_SEED ?= 1
# The coordinator-kill scenario: a kill every 8 s through a 40-epoch run.
CHAOS_COORDINATOR_KILL_MS ?= 8000
CHAOS_COORDINATOR_EPOCHS ?= 40
chaos: build
	@mkdir -p bench/results
	@printf '%s\n\n%s\n%s\n' \
	  "make chaos CHAOS_EPOCHS=$(CHAOS_EPOCHS) CHAOS_FAULTS=$(CHAOS_FAULTS) CHAOS_SEED=$(CHAOS_SEED)" \
	  "| strategy | kill -9 | SIGSTOP | completed | steps applied / scheduled | lost steps | restarts | accuracy - fault-free |" \
	  "|---|---|---|---|---|---|---|---|" > bench/results/chaos.md
	@printf '%s\n\n%s\n%s\n' \
	  "make chaos CHAOS_COORDINATOR_EPOCHS=$(CHAOS_COORDINATOR_EPOCHS) CHAOS_COORDINATOR_KILL_MS=$(CHAOS_COORDINATOR_KILL_MS): kill -9 of the coordinator every $(CHAOS_COORDINATOR_KILL_MS) ms for the whole run" \
	  "| strategy | coordinator kills | completed | steps applied / scheduled | run / fault-free run | cost per kill | accuracy - fault-free |" \
	  "|---|---|---|---|---|---|---|" > bench/results/chaos_coordinator.md
	STRATA_CHAOS_EPOCHS=$(CHAOS_EPOCHS) STRATA_CHAOS_FAULTS=$(CHAOS_FAULTS) \
	  STRATA_CHAOS_SEED=$(CHAOS_SEED) \
	  STRATA_CHAOS_REPORT=$(CURDIR)/bench/results/chaos.md \
	  STRATA_CHAOS_COORDINATOR_KILL_MS=$(CHAOS_COORDINATOR_KILL_MS) \
	  STRATA_CHAOS_COORDINATOR_EPOCHS=$(CHAOS_COORDINATOR_EPOCHS) \
	  STRATA_CHAOS_COORDINATOR_REPORT=$(CURDIR)/bench/results/chaos_coordinator.md \
	  $(BUILD_DIR)/bin/chaos_test
	@cat bench/results/chaos.md bench/results/chaos_coordinator.md

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

# Async accuracy against the single process, RUNS runs per topology and
# plane, with STEPS_IN_FLIGHT steps per worker (issue 14).
async-accuracy: build
	bench/async_accuracy.sh

# The criteo_like job on a generated 10M-row set: local_train, async and
# sync clusters, AUC against the generator's ceiling (issue 15).
criteo-compare: build
	bench/criteo_compare.sh

# The layer-graph models against their baselines (issue 29): the CNN against
# PyTorch and DDP (ACCURACY=1: 5 epochs under every strategy), the
# recommendation models on parameter servers, and the residual block under
# the strategies.
cnn-compare: build
	bench/cnn_compare.sh

# The Python guide programs (examples/python/guides) in full: a table of the
# accuracy each reaches against its guide's class.
guides: build
	PYTHONPATH=$(BUILD_DIR)/python /usr/bin/python3 examples/python/guides/run_guides.py

recsys-compare: build
	bench/recsys_compare.sh

model-strategies: build
	bench/model_strategies.sh

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

# ---- Fuzzing, sanitizers, load ----
.PHONY: fuzz fuzz-build asan asan-build tsan tsan-build load

# libFuzzer targets (tests/fuzz/), built by clang-14 with ASan and UBSan in
# $(FUZZ_DIR). `make fuzz` runs each for FUZZ_SECONDS; `make test` for
# FUZZ_TEST_SECONDS (their corpora and regression inputs are also replayed
# by ctest in the gcc build).
FUZZ_TARGETS := ps_create ps_push ps_pull ps_save_restore checkpoint_manifest \
  job_json tf_config chunk_codec
FUZZ_SECONDS ?= 180
FUZZ_TEST_SECONDS ?= 5
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined \
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz-build: deps
	cmake -S . -B $(FUZZ_DIR) -G "Unix Makefiles" \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo $(LINE_TABLES) \
	  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DSTRATA_FUZZ=ON -DSTRATA_WITH_CUDA=OFF -DSTRATA_WITH_PYTHON=OFF \
	  -DCMAKE_C_FLAGS="$(FUZZ_FLAGS)" -DCMAKE_CXX_FLAGS="$(FUZZ_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

fuzz: fuzz-build
	tests/fuzz/run_fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# AddressSanitizer + UndefinedBehaviorSanitizer (gcc) build of everything in
# $(ASAN_DIR), then the tests. tcmalloc is left out (ASan brings its own
# allocator). Line tables only (-g1): the reports keep file:line, the build is
# shorter.
#
# Every test but the process-level cluster ones runs under ASan; of those
# (each starts a coordinator, PS tasks and workers, one test at a time, 3-5x
# slower under ASan) ASAN_CLUSTER picks one of each kind: every daemon and
# strategy end to end, a PS killed and restored, TLS, the embedding tables,
# the final checkpoint. The chaos runs and the other fault scenarios run in
# `make test`'s gcc build; ASAN_CLUSTER=all runs every one under ASan too
# (CI's time budget does not hold that: 5400 s ran out in the chaos tests).
SAN_COMMON := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_WITH_CUDA=OFF -DSTRATA_WITH_PYTHON=OFF \
  -DTCMALLOC_LIB=OFF
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer
ASAN_CLUSTER ?= ^(LaunchTest\.(TrainsToCompletionWithTwoPsAndTwoWorkers|PsKilledAndRestartedRestoresTheCheckpoint|EmbeddingJobOnPsTablesSurvivesAKilledPs|TlsClusterWithCredentialsTrainsAndRestoresAKilledPs)|StrategiesLaunchTest\.(CentralStorageTrains|MultiWorkerMirroredRingTrains|MultiWorkerMirroredThroughPsTrains|MirroredTrainsReplicasInOneProcess)|FinalCheckpointTest\..*)$$
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
asan-build: deps
	cmake -S . -B $(ASAN_DIR) -G "Unix Makefiles" $(SAN_COMMON) \
	  -DCMAKE_C_FLAGS="$(ASAN_FLAGS)" -DCMAKE_CXX_FLAGS="$(ASAN_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
	  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
	cmake --build $(ASAN_DIR) -j$(JOBS)

asan: asan-build
	$(ASAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure -j2 \
	  --timeout 900 -LE 'cluster|deploy'
	if [ "$(ASAN_CLUSTER)" = all ]; then \
	  $(ASAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure \
	    --timeout 900 -L cluster; \
	else \
	  $(ASAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure \
	    --timeout 900 -L cluster -R '$(ASAN_CLUSTER)'; \
	fi

# ThreadSanitizer (gcc) build of the concurrency tests in $(TSAN_DIR), run
# one after the other. Debian's Abseil is not TSan-built: the preloaded
# tests/tsan/absl_sync_annotations.cc tells TSan what its locks order.
# tests/tsan.supp says what is suppressed, and why the gRPC service tests
# are not in the list (they need a TSan-built gRPC; set TSAN_TESTS to run
# them anyway).
TSAN_TESTS ?= buffer_pool_test logging_test metrics_test variable_store_test \
  variable_store_concurrency_test coordinator_state_test \
  coordinator_groups_test group_sync_test collective_test staged_apply_test
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
TSAN_SHIM := $(TSAN_DIR)/libstrata_tsan_absl.so
TSAN_ENV := LD_PRELOAD=$(CURDIR)/$(TSAN_SHIM) \
  TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1"
tsan-build: deps
	cmake -S . -B $(TSAN_DIR) -G "Unix Makefiles" $(SAN_COMMON) \
	  -DCMAKE_C_FLAGS="$(TSAN_FLAGS)" -DCMAKE_CXX_FLAGS="$(TSAN_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
	  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
	cmake --build $(TSAN_DIR) -j$(JOBS) --target $(TSAN_TESTS)
	g++ -std=c++17 -shared -fPIC -O1 -Wall -Wextra -Werror \
	  tests/tsan/absl_sync_annotations.cc -o $(TSAN_SHIM) -ldl

tsan: tsan-build
	@for t in $(TSAN_TESTS); do \
	  echo "tsan: $$t"; \
	  $(TSAN_ENV) $(TSAN_DIR)/bin/$$t --gtest_brief=1 || exit 1; \
	done

# Load: 64 simulated workers against one in-process PS for LOAD_SECONDS
# (bench/load_gen.cc; `load_gen --soak` runs 30 minutes).
LOAD_SECONDS ?= 60
load: build
	$(BUILD_DIR)/bin/load_gen --seconds $(LOAD_SECONDS) \
	  --markdown $(BUILD_DIR)/load.md

# The CUDA path on a GPU machine: builds build-cuda, runs the CUDA tests
# (fails if any skipped: the kernels must run) and the GPU benchmarks, and
# writes their figures to bench/results/gpu_check-*.json (bench/gpu_check.sh).
.PHONY: gpu-check
gpu-check: deps
	bench/gpu_check.sh

clean:
	rm -rf $(BUILD_DIR) $(TSA_DIR) $(FUZZ_DIR) $(ASAN_DIR) $(TSAN_DIR) \
	  build-cuda
