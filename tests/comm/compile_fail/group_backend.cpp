// Compile-fail cases: a type that takes a group of its comm policy's backend, given a group of
// another backend (or a handle whose type does not say its backend), must not compile, and the
// message must name the fix. MPP_COMPILE_FAIL_CASE picks the case; case 0 is the sound control.
// Nothing here runs: the functions are only compiled.
#include <torch/nn/modules/linear.h>

#include "mpp/comm.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/pipeline.hpp"

#ifndef MPP_COMPILE_FAIL_CASE
#error "define MPP_COMPILE_FAIL_CASE"
#endif

void compile_only() {
  auto gloo = mpp::init_process_group<mpp::Gloo>();
  auto shm = mpp::init_process_group<mpp::Shm>();
  [[maybe_unused]] torch::nn::Linear layer(4, 4);
  [[maybe_unused]] const mpp::models::MlpConfig config{.hidden = 8, .layers = 4, .seed = 1};
#if MPP_COMPILE_FAIL_CASE == 0
  // Each policy over a group of its own backend; an untyped handle through group_cast.
  mpp::Communicator<mpp::Async<mpp::Shm>> comm(shm);
  mpp::DDP<mpp::Async<mpp::Gloo>> ddp(*layer, gloo);
  mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<4>, mpp::Async<mpp::Shm>> pipe(shm,
                                                                           mpp::MlpModel{config});
  const mpp::ProcessGroup& erased = gloo;
  mpp::Communicator<mpp::Blocking<mpp::Gloo>> cast(mpp::group_cast<mpp::Gloo>(erased));
#elif MPP_COMPILE_FAIL_CASE == 1
  mpp::Communicator<mpp::Async<mpp::Shm>> comm(gloo);  // a Gloo group for a Shm policy
#elif MPP_COMPILE_FAIL_CASE == 2
  mpp::DDP<mpp::Async<mpp::Shm>> ddp(*layer, gloo);
#elif MPP_COMPILE_FAIL_CASE == 3
  mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<4>, mpp::Async<mpp::Gloo>> pipe(shm,
                                                                            mpp::MlpModel{config});
#elif MPP_COMPILE_FAIL_CASE == 4
  const mpp::ProcessGroup& erased = gloo;  // the type no longer says the backend
  mpp::Communicator<mpp::Async<mpp::Gloo>> comm(erased);
#endif
}
