# The worker's CUDA path (included from tests/CMakeLists.txt). Both tests
# build and run with or without CUDA: where no device (or no CUDA build) is
# there, the GPU-versus-CPU tests skip and the clear-error tests run.
if(TARGET strata_worker_core)
  strata_test(gpu_model_test strata_worker_core)
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
