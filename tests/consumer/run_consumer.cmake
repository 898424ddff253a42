# ctest's package.consumer: installs the build tree BUILD_DIR into WORK_DIR/prefix, configures and builds the
# consumer project SOURCE_DIR against it, and runs it (it exits non-zero on a wrong answer).
file(REMOVE_RECURSE "${WORK_DIR}")
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()
run("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
get_filename_component(cuda_bin "${CUDA_COMPILER}" DIRECTORY)
get_filename_component(cuda_root "${cuda_bin}" DIRECTORY)
run("configure" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCUDAToolkit_ROOT=${cuda_root}" -DCMAKE_BUILD_TYPE=Release)
run("build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("consumer" "${WORK_DIR}/build/consumer" "${WORK_DIR}/system.mtx")
message("${last_output}")
