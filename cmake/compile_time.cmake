# Compile time (docs/reliability.md, "Time in CI"): CI compiles the engine four times (the plain,
# ASan, TSan and fuzz trees) on a fresh 2-core machine with no compiler cache, so the time is
# mostly the compiler's.
#
# Precompiled headers: nlohmann/json.hpp reaches most files (through model/config_reader.h,
# tokenizer/json_fields.h, server/openai_schema.h) and gtest/gmock every test file; parsing them
# was 2-3 s of a typical 5-8 s file. Each listed target precompiles them once. The same code is
# compiled: a precompiled header only replaces parsing the headers' text. (ccache caches such
# files only with `sloppiness = pch_defines,time_macros`.)
#
# Unity builds (LATENT_UNITY_BUILD, on in CI's trees and the sanitizer and fuzz trees): a target's
# files compiled in batches of LATENT_UNITY_BATCH per translation unit, so the headers and their
# template instances are compiled once per batch. Names in a file's anonymous namespace must then
# differ from those of the other files of its target. The family files (src/model/arch) are
# left out: each defines the same Parse/Make/ForEachTensor by design (registry.h).
option(LATENT_PRECOMPILE_HEADERS "Precompile the common headers of the large targets" ON)
option(LATENT_UNITY_BUILD "Compile the large targets' files in unity batches" OFF)
set(LATENT_UNITY_BATCH 8 CACHE STRING "Files per unity translation unit (LATENT_UNITY_BUILD)")

set(LATENT_PCH_STD <algorithm> <cstdint> <functional> <map> <memory> <optional> <string>
    <string_view> <unordered_map> <utility> <vector>)

# latent_compile_faster(<target> [JSON] [GTEST] [NO_UNITY])
function(latent_compile_faster target)
  cmake_parse_arguments(ARG "JSON;GTEST;NO_UNITY" "" "" ${ARGN})
  if(NOT TARGET ${target})
    return()
  endif()
  if(LATENT_PRECOMPILE_HEADERS)
    set(headers ${LATENT_PCH_STD})
    if(ARG_JSON)
      list(APPEND headers <nlohmann/json.hpp>)
    endif()
    if(ARG_GTEST)
      list(APPEND headers <gtest/gtest.h> <gmock/gmock.h>)
    endif()
    target_precompile_headers(${target} PRIVATE ${headers})
  endif()
  if(LATENT_UNITY_BUILD AND NOT ARG_NO_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${LATENT_UNITY_BATCH})
  endif()
endfunction()
