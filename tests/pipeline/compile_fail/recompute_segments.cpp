// Compile-fail cases for a Pipeline's recompute segments, chosen by MPP_COMPILE_FAIL_CASE
// (tests/pipeline/CMakeLists.txt). Case 0 is the control and must compile.
#include "mpp/comm/policy.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "mpp/schedule.hpp"

#if MPP_COMPILE_FAIL_CASE == 0
// Several segments under a fused backward (B): fine.
using Pipe =
    mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>, 2>, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>>;
#elif MPP_COMPILE_FAIL_CASE == 1
// ZB-H1 splits the backward into I and W: the whole graph lives until W, segments save nothing.
using Pipe =
    mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>, 2>, mpp::ZeroBubbleH1<4>, mpp::Async<mpp::Gloo>>;
#endif

std::size_t pipeline_size() { return sizeof(Pipe); }
