# `cmake --install`: the two commands, and the C++ SDK for workers that
# find_package(elasticrun CONFIG) (docs/sdk-cpp.md): the public headers of
# include/elasticrun and the static libraries behind them, as exported
# targets elasticrun::sdk (worker.hpp, inprocess.hpp, batch.hpp,
# sampler.hpp), elasticrun::ckpt (checkpoint.hpp) and elasticrun::store
# (store_client.hpp), with what they link. checkpoint_torch.hpp is left out:
# its library is built only against libtorch (ELASTICRUN_WITH_TORCH).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS elasticrun elasticctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT commands)

# Exported under short names (elasticrun::sdk); the warnings target comes
# along only because the libraries name it privately (its flags never
# reach a consumer).
set(elasticrun_exported sdk ckpt store control cli util warnings)
foreach(name ${elasticrun_exported})
  set_target_properties(elasticrun_${name} PROPERTIES EXPORT_NAME ${name})
endforeach()
list(TRANSFORM elasticrun_exported PREPEND elasticrun_ OUTPUT_VARIABLE elasticrun_exported_targets)
install(TARGETS ${elasticrun_exported_targets} EXPORT elasticrunTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdk
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/elasticrun DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT sdk
  PATTERN checkpoint_torch.hpp EXCLUDE)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/elasticrun/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/elasticrun COMPONENT sdk)

set(elasticrun_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/elasticrun)
install(EXPORT elasticrunTargets NAMESPACE elasticrun:: DESTINATION ${elasticrun_cmake_dir}
  COMPONENT sdk)
configure_package_config_file(cmake/elasticrunConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/elasticrunConfig.cmake INSTALL_DESTINATION ${elasticrun_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/elasticrunConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/elasticrunConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/elasticrunConfigVersion.cmake
  DESTINATION ${elasticrun_cmake_dir} COMPONENT sdk)
