# ctest layering_upward_include_fails: builds the control (must compile) and the upward include
# (must fail, and fail on the model/ header being not found).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target latent_layering_downward
                RESULT_VARIABLE down_rc OUTPUT_VARIABLE down_out ERROR_VARIABLE down_out)
if(NOT down_rc EQUAL 0)
  message(FATAL_ERROR "the control (cache including base/ and cache/) does not compile:\n${down_out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target latent_layering_upward
                RESULT_VARIABLE up_rc OUTPUT_VARIABLE up_out ERROR_VARIABLE up_out)
if(up_rc EQUAL 0)
  message(FATAL_ERROR "cache/ including model/model.h compiled: the build does not enforce the layering")
endif()
if(NOT up_out MATCHES "model/model\\.h[':]+ (No such file|file not found)")
  message(FATAL_ERROR "cache/ including model/model.h failed, but not for the missing include:\n${up_out}")
endif()
message(STATUS "cache/ cannot include model/: the layering holds")
