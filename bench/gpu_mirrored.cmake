# The Mirrored strategy's NCCL all-reduce benchmark (run by
# bench/gpu_check.sh); built only where kernels/cuda/nccl.cmake found NCCL.
if(TARGET strata_nccl AND TARGET strata_collective)
  add_executable(gpu_nccl_bench gpu_nccl_bench.cc)
  strata_target(gpu_nccl_bench)
  target_link_libraries(gpu_nccl_bench PRIVATE strata_collective strata_nccl
    nlohmann_json::nlohmann_json absl::flags absl::flags_parse absl::strings)
endif()
