include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS mpp mpp_schedule EXPORT mppTargets)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mppTargets NAMESPACE mpp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mpp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mppConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mppConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mpp)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mppConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
# mppConfig.cmake checks the consumer's LibTorch with the same function as mpp's own build.
install(FILES ${PROJECT_BINARY_DIR}/mppConfig.cmake ${PROJECT_BINARY_DIR}/mppConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/MppCheckTorch.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mpp)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
