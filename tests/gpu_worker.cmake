# The worker's CUDA path (included from tests/CMakeLists.txt). Both tests
# build and run with or without CUDA: where no device (or no CUDA build) is
# there, the GPU-versus-CPU tests skip and the clear-error tests run.
# Labelled cuda, so that `ctest -L cuda` (bench/gpu_check.sh) builds and runs
# it; only the no-device skip counts as Skipped (the no-device tests skip
# with "a CUDA device is present" where there is one, and pass).
if(TARGET strata_worker_core AND
   EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/gpu_model_test.cc)
  add_executable(gpu_model_test gpu_model_test.cc)
  strata_target(gpu_model_test)
  target_link_libraries(gpu_model_test PRIVATE strata_worker_core GTest::gtest
    GTest::gmock GTest::gtest_main)
  gtest_discover_tests(gpu_model_test DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT 300 LABELS cuda
    SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
endif()

# Processes asked for a CUDA device they cannot use exit non-zero at start.
if(TARGET strata_worker_core AND TARGET local_train AND TARGET strata-worker)
  add_executable(worker_device_test worker_device_test.cc)
  strata_target(worker_device_test)
  target_link_libraries(worker_device_test PRIVATE strata_worker_core
    nlohmann_json::nlohmann_json GTest::gtest GTest::gtest_main)
  target_compile_definitions(worker_device_test PRIVATE
    STRATA_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(worker_device_test local_train strata-worker)
  gtest_discover_tests(worker_device_test DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT 300)
endif()
