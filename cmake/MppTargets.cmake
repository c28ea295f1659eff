# GNUInstallDirs first: the install interface below needs CMAKE_INSTALL_INCLUDEDIR on the first configure.
include(GNUInstallDirs)

# mpp::schedule — the compile-time schedules, standard library only.
add_library(mpp_schedule INTERFACE)
add_library(mpp::schedule ALIAS mpp_schedule)
set_target_properties(mpp_schedule PROPERTIES EXPORT_NAME schedule)
target_compile_features(mpp_schedule INTERFACE cxx_std_20)
target_include_directories(mpp_schedule INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# mpp::mpp — the whole library on LibTorch and c10d/Gloo; nlohmann/json for the checkpoints.
add_library(mpp INTERFACE)
add_library(mpp::mpp ALIAS mpp)
set_target_properties(mpp PROPERTIES EXPORT_NAME mpp)
target_link_libraries(mpp INTERFACE mpp_schedule torch nlohmann_json::nlohmann_json)
target_include_directories(mpp SYSTEM INTERFACE $<BUILD_INTERFACE:${MPP_GLOO_INCLUDE_DIR}>)
target_compile_definitions(mpp INTERFACE USE_C10D_GLOO $<$<BOOL:${MPP_WITH_NCCL}>:MPP_WITH_NCCL USE_C10D_NCCL>)
