# Install-time script of the wheel (cmake/wheel.cmake): copies the shared
# libraries that ELASTICRUN_BUNDLE_EXECUTABLES load, beyond the C and C++
# runtimes, into ELASTICRUN_BUNDLE_DIR, each under the name the loader looks
# for. A library that cannot be found here is an error: the wheel would not run.
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${ELASTICRUN_BUNDLE_EXECUTABLES}
  RESOLVED_DEPENDENCIES_VAR libs
  UNRESOLVED_DEPENDENCIES_VAR missing
  # The C and C++ runtimes and the loader, which every Linux with a Python has.
  PRE_EXCLUDE_REGEXES
    "^ld-linux" "^linux-vdso" "^libc\\.so" "^libm\\.so" "^libmvec\\.so" "^libpthread\\.so"
    "^libdl\\.so" "^librt\\.so" "^libresolv\\.so" "^libstdc\\+\\+\\.so" "^libgcc_s\\.so")
if(missing)
  message(FATAL_ERROR "the wheel's binaries need libraries not found here: ${missing}")
endif()
file(MAKE_DIRECTORY "${ELASTICRUN_BUNDLE_DIR}")
foreach(lib IN LISTS libs)
  get_filename_component(name "${lib}" NAME)
  message(STATUS "Bundling ${lib}")
  file(COPY_FILE "${lib}" "${ELASTICRUN_BUNDLE_DIR}/${name}")
endforeach()
