# The parameter server's CUDA path (included at the end of
# tests/CMakeLists.txt).

# --device where no usable CUDA device is asked for: runs in every build,
# with or without CUDA, and on every machine.
strata_test(ps_device_test strata_server)
if(TARGET ps_device_test)
  target_compile_definitions(ps_device_test PRIVATE
    STRATA_PS_BINARY="$<TARGET_FILE:strata-ps>")
  add_dependencies(ps_device_test strata-ps)
endif()

# GPU-resident variables against the host PS; skips without a device
# (reported by ctest as "Skipped"). Registered with add_test, not
# gtest_discover_tests, as kernels/cuda's tests are.
if(TARGET strata_cuda_optimizers AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/gpu_ps_test.cc)
  add_executable(gpu_ps_test gpu_ps_test.cc)
  strata_target(gpu_ps_test)
  target_link_libraries(gpu_ps_test PRIVATE strata_server strata_client
    GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME gpu_ps_test COMMAND gpu_ps_test --gtest_brief=1)
  set_tests_properties(gpu_ps_test PROPERTIES TIMEOUT 300 LABELS cuda
    SKIP_REGULAR_EXPRESSION "no CUDA device, skipping")
endif()
