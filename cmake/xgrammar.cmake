# XGrammar (structured output: JSON-schema grammars, token masks) built from its PyPI sdist, as
# bench/compare builds llama.cpp from llama-cpp-python's: the pinned sdist is downloaded once with
# pip (checked against its SHA-256) into LATENT_DEPS_CACHE, unpacked into the build tree, and only
# its C++ core library (target `xgrammar`) is built: no Python bindings, no tests. Nothing of its
# source lives in this repository.
set(LATENT_XGRAMMAR_VERSION 0.2.9)
set(LATENT_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)
set(LATENT_DEPS_CACHE "${PROJECT_SOURCE_DIR}/.cache/deps" CACHE PATH
    "Where downloaded dependency sources (the XGrammar sdist) are kept between build trees")

set(_xgr_name xgrammar-${LATENT_XGRAMMAR_VERSION})
set(_xgr_sdist ${LATENT_DEPS_CACHE}/${_xgr_name}.tar.gz)
set(_xgr_src ${PROJECT_BINARY_DIR}/_deps/${_xgr_name})

if(EXISTS ${_xgr_sdist})
  file(SHA256 ${_xgr_sdist} _xgr_have)
  if(NOT _xgr_have STREQUAL LATENT_XGRAMMAR_SHA256)
    message(STATUS "xgrammar: ${_xgr_sdist} has the wrong SHA-256; downloading it again")
    file(REMOVE ${_xgr_sdist})
  endif()
endif()
if(NOT EXISTS ${_xgr_sdist})
  if(NOT Python_EXECUTABLE AND EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(Python_EXECUTABLE ${PROJECT_SOURCE_DIR}/.venv/bin/python)  # the fuzz build's configure
  elseif(NOT Python_EXECUTABLE)
    find_package(Python 3.9 REQUIRED COMPONENTS Interpreter)
  endif()
  message(STATUS "xgrammar: downloading the ${_xgr_name} sdist with pip into ${LATENT_DEPS_CACHE}")
  # --no-build-isolation: pip reads the sdist's metadata with the venv's scikit-build-core and
  # setuptools-scm (requirements-dev.txt) instead of building its build requirements from source.
  execute_process(
    COMMAND ${Python_EXECUTABLE} -m pip download -q --disable-pip-version-check --no-deps
            --no-binary :all: --no-build-isolation xgrammar==${LATENT_XGRAMMAR_VERSION}
            -d ${LATENT_DEPS_CACHE}
    RESULT_VARIABLE _xgr_rc)
  if(NOT _xgr_rc EQUAL 0 OR NOT EXISTS ${_xgr_sdist})
    message(FATAL_ERROR "xgrammar: could not download the xgrammar==${LATENT_XGRAMMAR_VERSION} sdist "
                        "with ${Python_EXECUTABLE} -m pip (run `make setup` first)")
  endif()
  file(SHA256 ${_xgr_sdist} _xgr_have)
  if(NOT _xgr_have STREQUAL LATENT_XGRAMMAR_SHA256)
    message(FATAL_ERROR "xgrammar: ${_xgr_sdist} has SHA-256 ${_xgr_have}, expected ${LATENT_XGRAMMAR_SHA256}")
  endif()
endif()
if(NOT EXISTS ${_xgr_src}/CMakeLists.txt)
  file(ARCHIVE_EXTRACT INPUT ${_xgr_sdist} DESTINATION ${PROJECT_BINARY_DIR}/_deps)
endif()

# XGrammar's CMakeLists reads its settings from ${CMAKE_BINARY_DIR}/config.cmake first (before the
# sdist's own cmake/config.cmake, which turns the Python bindings on): the C++ library alone.
file(WRITE ${PROJECT_BINARY_DIR}/config.cmake
     "# Written by latent's cmake/xgrammar.cmake: XGrammar's build settings.\n"
     "set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n"
     "set(XGRAMMAR_ENABLE_CPPTRACE OFF)\nset(XGRAMMAR_ENABLE_COVERAGE OFF)\n"
     "set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)\n")
# EXCLUDE_FROM_ALL: only what latent links is built; its install() rules are left out.
add_subdirectory(${_xgr_src} ${PROJECT_BINARY_DIR}/_deps/${_xgr_name}-build EXCLUDE_FROM_ALL SYSTEM)
# Its CMakeLists adds -O3 -Werror -flto=auto for the whole directory: no LTO objects in a static
# library latent links normally, and no build failure on a newer compiler's warning. Our
# -Wall -Wextra stay off for third-party code, and so does debug info (-g0: a leaner CI build).
target_compile_options(xgrammar PRIVATE -fno-lto -Wno-error -w -g0)
# Sanitizer and fuzz trees: -O1 instead of its -O3 (instrumented -O3 of its 31 files was about a
# fifth of the TSan tree's compile); its grammars are still compiled and matched there.
if(LATENT_SANITIZER_BUILD)
  target_compile_options(xgrammar PRIVATE -O1)
endif()
# Unity batches in CI's trees as for our own targets (cmake/compile_time.cmake).
if(LATENT_UNITY_BUILD)
  set_target_properties(xgrammar PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${LATENT_UNITY_BATCH})
endif()
