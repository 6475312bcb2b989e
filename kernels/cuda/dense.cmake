# Dense layers on the GPU for workers (included from kernels/cuda/
# CMakeLists.txt, so only with STRATA_WITH_CUDA): cuBLAS SGEMM, activations,
# losses and dropout masks as kernels. dense_kernels.h is plain C++; the
# worker's GPU model (worker/gpu_model.cc) links this where it exists.

add_library(strata_cuda_dense
  dense_kernels.cu
)
target_compile_options(strata_cuda_dense PRIVATE ${STRATA_CUDA_WARNINGS})
target_include_directories(strata_cuda_dense PUBLIC ${PROJECT_SOURCE_DIR})
set_target_properties(strata_cuda_dense PROPERTIES
  CUDA_RUNTIME_LIBRARY Shared
  POSITION_INDEPENDENT_CODE ON)
target_link_libraries(strata_cuda_dense
  PUBLIC strata_cuda absl::status absl::statusor
  PRIVATE absl::strings CUDA::cudart CUDA::cublas)

# CPU-versus-GPU equivalence of every kernel. Skips itself without a device
# (reported by ctest as "Skipped"); the argument checks run everywhere.
add_executable(dense_kernels_test dense_kernels_test.cc)
strata_target(dense_kernels_test)
target_link_libraries(dense_kernels_test PRIVATE strata_cuda_dense
  GTest::gtest GTest::gtest_main)
add_test(NAME dense_kernels_test COMMAND dense_kernels_test --gtest_brief=1)
set_tests_properties(dense_kernels_test PROPERTIES TIMEOUT 300 LABELS cuda
  SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
