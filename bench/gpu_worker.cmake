# The worker's GPU path against its CPU path (included from
# bench/CMakeLists.txt; built only with CUDA). bench/gpu_check.sh runs
# <build>/bin/gpu_dense_bench and reads its one JSON line.
if(TARGET strata_cuda_dense AND TARGET strata_worker_core)
  add_executable(gpu_dense_bench gpu_dense_bench.cc)
  strata_target(gpu_dense_bench)
  target_link_libraries(gpu_dense_bench PRIVATE strata_worker_core
    nlohmann_json::nlohmann_json absl::flags absl::flags_parse)
endif()
