# NCCL all-reduce between the local GPUs, for the Mirrored strategy
# (collective/nccl.h). Included by kernels/cuda/CMakeLists.txt, so only with
# STRATA_WITH_CUDA. Defines `strata_nccl` (NCCL results as Status; links NCCL
# and the CUDA runtime) where NCCL is found; collective/CMakeLists.txt then
# compiles collective/nccl.cc into strata_collective, and the stub otherwise.

find_library(STRATA_NCCL_LIBRARY nccl
  PATHS /usr/local/cuda/lib64 ${CUDAToolkit_LIBRARY_DIR})
find_path(STRATA_NCCL_INCLUDE_DIR nccl.h
  PATHS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(NOT STRATA_NCCL_LIBRARY OR NOT STRATA_NCCL_INCLUDE_DIR)
  message(WARNING "NCCL not found (libnccl under /usr/local/cuda/lib64, "
    "nccl.h with the CUDA headers): Mirrored on GPUs will fail "
    "FAILED_PRECONDITION in this build")
  return()
endif()

# The folders that link strata_nccl (collective/, sdk/, tests) resolve its
# CUDA::cudart too.
set_target_properties(CUDA::cudart PROPERTIES IMPORTED_GLOBAL TRUE)

add_library(strata_nccl nccl_status.cc)
target_compile_options(strata_nccl PRIVATE ${STRATA_WARNINGS})
target_include_directories(strata_nccl PUBLIC ${PROJECT_SOURCE_DIR}
  ${STRATA_NCCL_INCLUDE_DIR})
set_target_properties(strata_nccl PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries(strata_nccl
  PUBLIC strata_cuda CUDA::cudart ${STRATA_NCCL_LIBRARY} absl::status
  PRIVATE absl::strings)

# NCCL all-reduce against the CPU ring all-reduce, and its timeout. Skips
# itself where no device is usable (reported by ctest as "Skipped").
add_executable(nccl_test nccl_test.cc)
strata_target(nccl_test)
target_link_libraries(nccl_test PRIVATE strata_collective strata_nccl
  strata_cuda absl::synchronization GTest::gtest GTest::gtest_main)
add_test(NAME nccl_test COMMAND nccl_test --gtest_brief=1)
set_tests_properties(nccl_test PROPERTIES TIMEOUT 300 LABELS cuda
  SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
