# The server optimizers as CUDA kernels (included by CMakeLists.txt in this
# folder, so only with STRATA_WITH_CUDA): their own library beside
# strata_cuda, used by the parameter server's GPU-resident variables
# (server/device_state_cuda.cc) and bench/gpu_optimizer_bench.cc.

add_library(strata_cuda_optimizers
  optimizer_kernels.cu
)
target_compile_options(strata_cuda_optimizers PRIVATE ${STRATA_CUDA_WARNINGS})
target_include_directories(strata_cuda_optimizers PUBLIC ${PROJECT_SOURCE_DIR})
set_target_properties(strata_cuda_optimizers PROPERTIES
  CUDA_RUNTIME_LIBRARY Shared
  POSITION_INDEPENDENT_CODE ON)
target_link_libraries(strata_cuda_optimizers
  PUBLIC strata_cuda strata_kernels absl::status absl::statusor absl::span
  PRIVATE absl::strings absl::str_format CUDA::cudart)

# CPU-versus-GPU equivalence of every kernel; the argument checks run without
# a device, the rest skip (ctest reports the test "Skipped" then).
add_executable(optimizer_kernels_test optimizer_kernels_test.cc)
strata_target(optimizer_kernels_test)
target_link_libraries(optimizer_kernels_test PRIVATE strata_cuda_optimizers
  strata_kernels GTest::gtest GTest::gtest_main)
add_test(NAME optimizer_kernels_test
  COMMAND optimizer_kernels_test --gtest_brief=1)
set_tests_properties(optimizer_kernels_test PROPERTIES TIMEOUT 300
  LABELS cuda SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
