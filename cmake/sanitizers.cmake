# Sanitizer and fuzzing builds (README "Fuzzing and sanitizers"). Each uses
# its own build directory (make asan / tsan / fuzz): the flags apply to every
# target of the project, not to the system libraries it links.
#
#   ECHO_SANITIZE=address  ASan + UBSan (any UB aborts the test)
#   ECHO_SANITIZE=thread   TSan
#   ECHO_FUZZ=ON           clang only: libFuzzer targets in tests/fuzz, the
#                          project compiled with ASan + UBSan and coverage
set(ECHO_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan) or thread")
option(ECHO_FUZZ "Build the libFuzzer targets in tests/fuzz (clang)" OFF)

# Tests that wait on a solver or a clock scale their limits by this: code
# under ASan runs ~3x slower, under TSan ~10x.
set(ECHO_TEST_TIME_SCALE 1)
set(ECHO_ASAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)

if(ECHO_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ECHO_FUZZ needs clang: -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # fuzzer-no-link: coverage for libFuzzer everywhere; only the fuzz targets
  # link libFuzzer's main (tests/fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link ${ECHO_ASAN_FLAGS})
  add_link_options(${ECHO_ASAN_FLAGS})
  set(ECHO_TEST_TIME_SCALE 4)  # the tests built here (make hardening)
elseif(ECHO_SANITIZE STREQUAL "address")
  add_compile_options(${ECHO_ASAN_FLAGS})
  add_link_options(${ECHO_ASAN_FLAGS})
  set(ECHO_TEST_TIME_SCALE 4)
elseif(ECHO_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  set(ECHO_TEST_TIME_SCALE 10)
elseif(NOT ECHO_SANITIZE STREQUAL "")
  message(FATAL_ERROR "ECHO_SANITIZE: address or thread, not '${ECHO_SANITIZE}'")
endif()
