# What the wheel (pyproject.toml, built by scikit-build-core) installs:
# elasticrun and elasticctl as its scripts (the venv's bin/), the shared
# libraries they load beyond the C and C++ runtimes as its data
# (<venv>/lib/elasticrun), and the SDK's _version.py. The binaries find the
# libraries through an RPATH relative to themselves: DT_RPATH, not
# RUNPATH, because it also serves the libraries' own dependencies (cairo's
# pixman, httplib's OpenSSL), which RUNPATH would leave to the system.
set(elasticrun_wheel_libdir lib/elasticrun)
foreach(exe elasticrun elasticctl)
  set_target_properties(${exe} PROPERTIES INSTALL_RPATH "$ORIGIN/../${elasticrun_wheel_libdir}")
  target_link_options(${exe} PRIVATE -Wl,--disable-new-dtags)
endforeach()
install(TARGETS elasticrun elasticctl RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
# Each library under the name the binaries ask for (its soname), once: a
# wheel holds no symbolic links (cmake/bundle_libs.cmake).
install(CODE "set(ELASTICRUN_BUNDLE_EXECUTABLES [[$<TARGET_FILE:elasticrun>;$<TARGET_FILE:elasticctl>]])
set(ELASTICRUN_BUNDLE_DIR [[${SKBUILD_DATA_DIR}/${elasticrun_wheel_libdir}]])")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/bundle_libs.cmake)
configure_file(${CMAKE_CURRENT_LIST_DIR}/_version.py.in ${CMAKE_CURRENT_BINARY_DIR}/_version.py @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/_version.py DESTINATION ${SKBUILD_PLATLIB_DIR}/elasticrun)
