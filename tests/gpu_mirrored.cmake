# Mirrored on GPUs (NCCL all-reduce): the NCCL group, the SDK's
# MirroredStrategy::CreateOnDevices and a strata-worker with a mirrored
# "cuda" job. Registered in every build: without a usable GPU (or without
# CUDA) the tests of the clear FAILED_PRECONDITION run and those that need a
# GPU skip ("no CUDA device, skipping": ctest reports them Skipped); with a
# GPU it is the other way round. Labelled cuda, so bench/gpu_check.sh runs it.
# The NCCL-against-CPU tests that need CUDA headers are in
# kernels/cuda/nccl.cmake.
if(TARGET strata_sdk AND TARGET strata AND TARGET strata-worker AND
   TARGET strata-coordinator)
  add_executable(gpu_mirrored_test gpu_mirrored_test.cc)
  strata_target(gpu_mirrored_test)
  target_link_libraries(gpu_mirrored_test PRIVATE strata_sdk strata_collective
    strata_client GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(gpu_mirrored_test PRIVATE
    STRATA_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(gpu_mirrored_test strata strata-ps strata-worker
    strata-coordinator)
  gtest_discover_tests(gpu_mirrored_test DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT 600 LABELS cuda
    SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
endif()
