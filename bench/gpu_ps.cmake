# GPU benchmark of the parameter server's CUDA path (included from
# bench/CMakeLists.txt; run by bench/gpu_check.sh as
# <build>/bin/gpu_optimizer_bench). Built only with the CUDA optimizer
# kernels.
if(TARGET strata_cuda_optimizers AND TARGET strata_server)
  add_executable(gpu_optimizer_bench gpu_optimizer_bench.cc)
  strata_target(gpu_optimizer_bench)
  target_link_libraries(gpu_optimizer_bench PRIVATE strata_cuda_optimizers
    strata_server absl::flags absl::flags_parse nlohmann_json::nlohmann_json)
endif()
