#pragma once
// The harness of the write-it-yourself labs: everything around the loop the learner writes. It
// builds the course MLP (8 x Linear(32), the layers of each rank with the whole model's initial
// weights), makes the batches, steps the optimizer, and then checks the learner's training against
// two references run on the same ranks, from the same weights, on the same batches:
//   (a) the monolith: the whole model trained on one process (every rank trains its own copy);
//   (b) mpp's own implementation: a mpp::Pipeline with the lab's schedule, or mpp::NaiveDP /
//       mpp::DDP for the data-parallel labs.
// The losses and every parameter must agree to 1e-6 (relative for values above 1). Rank 0 prints
// "PASS: ..." and every rank exits 0; otherwise every rank prints what differs and exits 1.
//
// A lab file defines its training step and ends with a main that hands it to check_pipeline() or
// check_data_parallel(). The harness itself (harness.cpp) is compiled once for all the labs.
//
//   build/release/tools/mpprun/mpprun --nproc-per-node 2 <lab binary> [--steps 3]
//                                                                      [--both-send-first]
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mpp/comm/init.hpp"
#include "mpp/models/mlp.hpp"

#include "unfinished.hpp"

namespace lab {

/// The job's process group, whatever mpp::init_process_group() returns.
using Group = decltype(mpp::init_process_group());

/// The process group as a lab gets it: the job's group, every call of which is the library's,
/// through which the check also sees when the lab starts its all-reduces (the ddp_hooks lab must
/// start some while backward() is still running).
class World : public Group {
 public:
  /// The all-reduces started through this World (or a copy of it) so far.
  struct AllReduces {
    int started = 0;
    int during_backward = 0;  ///< started while autograd ran a backward on this thread
  };

  explicit World(const Group& group) : Group(group) {}

  [[nodiscard]] mpp::Request iall_reduce(const at::Tensor& tensor,
                                         mpp::ReduceOp op = mpp::ReduceOp::sum) const {
    note_all_reduce();
    return Group::iall_reduce(tensor, op);
  }
  void all_reduce(const at::Tensor& tensor, mpp::ReduceOp op = mpp::ReduceOp::sum) const {
    note_all_reduce();
    Group::all_reduce(tensor, op);
  }
  [[nodiscard]] mpp::Request iall_reduce_mean(const at::Tensor& tensor) const {
    note_all_reduce();
    return Group::iall_reduce_mean(tensor);
  }
  void all_reduce_mean(const at::Tensor& tensor) const {
    note_all_reduce();
    Group::all_reduce_mean(tensor);
  }

  AllReduces all_reduces() const { return *all_reduces_; }

  [[nodiscard]] mpp::Request isend(const at::Tensor& tensor, int dst, int tag = 0) const {
    note_send(tensor, dst);
    return Group::isend(tensor, dst, tag);
  }
  void send(const at::Tensor& tensor, int dst, int tag = 0) const {
    note_send(tensor, dst);
    Group::send(tensor, dst, tag);
  }

  /// The number of elements of each message sent through this World (or a copy of it) so far.
  std::vector<std::int64_t> sends() const { return *sends_; }

 private:
  void note_all_reduce() const;  // data_parallel_check.cpp
  // Records the message's size; a pipeline check also notes what the stage had computed when a
  // gradient went to the previous rank (the split_backward lab must send it before W).
  void note_send(const at::Tensor& tensor, int dst) const;  // pipeline_check.cpp
  std::shared_ptr<AllReduces> all_reduces_ = std::make_shared<AllReduces>();
  std::shared_ptr<std::vector<std::int64_t>> sends_ = std::make_shared<std::vector<std::int64_t>>();
};

/// A batch of the regression task: `inputs` and `targets`, both [rows, 32].
using Batch = mpp::models::Batch;

/// What one rank of a pipeline lab holds.
struct Stage {
  /// This rank's consecutive layers of the model (Linear, ReLU, ...): rank r of P holds layers
  /// [r * 8 / P, (r + 1) * 8 / P). Every activation between two stages has the shape of the
  /// batch's inputs, [rows, 32].
  torch::nn::Sequential layers;
  /// How many micro-batches to cut a batch into (the labs that use micro-batches).
  int micro_batches = 4;
  /// Set by --both-send-first: every rank sends before it receives (1F1B with blocking sends).
  bool both_send_first = false;
};

/// One training step of a pipeline lab on this rank: forward and backward of `batch` through
/// every stage, leaving each parameter's gradient of the batch's mean loss in its .grad (the
/// harness zeroes them before and steps the optimizer after). Every rank gets the same batch,
/// but only the first reads its inputs and only the last its targets. Returns the batch's mean
/// loss on the last rank (what the other ranks return is not read).
using PipelineStep = std::function<double(const World& world, Stage& stage, const Batch& batch)>;

/// The mpp::Pipeline a pipeline lab is compared with (Uniform stages, Gloo).
enum class PipelineReference {
  naive,              ///< Naive (one micro-batch), Blocking
  gpipe,              ///< GPipe<4>, Blocking
  one_f_one_b,        ///< OneFOneB<4>, Blocking
  one_f_one_b_async,  ///< OneFOneB<4>, Async
  gpipe_recompute,    ///< Recompute<Uniform<P>>, GPipe<4>, Blocking
  zero_bubble_h1      ///< ZeroBubbleH1<4>, Async
};

/// Runs the pipeline lab `lab` on the launched ranks (2 or 4) and checks it (see the file
/// comment); returns main's exit code.
int check_pipeline(int argc, char** argv, const char* lab, PipelineReference reference,
                   const PipelineStep& step);

/// One training step of a data-parallel lab on this rank, made by the lab's replica (see
/// check_data_parallel): every rank gets the same global batch, trains on its own share of the
/// rows, and leaves in each .grad the gradient of the global batch's mean loss. Returns that
/// loss (the same on every rank).
using DataParallelStep = std::function<double(const Batch& global_batch)>;
/// Builds a rank's replica around its copy of the whole model and returns its step.
using StartReplica =
    std::function<DataParallelStep(const World& world, torch::nn::Sequential& model)>;

/// The mpp data parallelism a data-parallel lab is compared with (Gloo).
enum class DataParallelReference {
  naive_dp,  ///< NaiveDP<Blocking<Gloo>>: every gradient all-reduced after backward
  ddp        ///< DDP<Async<Gloo>>: bucketed all-reduces started by gradient hooks
};

/// Runs the data-parallel lab `lab` on the launched ranks and checks it; returns main's exit
/// code.
int check_data_parallel(int argc, char** argv, const char* lab, DataParallelReference reference,
                        const StartReplica& start);

/// check_data_parallel for a lab's `Replica` class: `Replica(world, model)` on every rank once,
/// then `replica.train_step(global_batch)` every step.
template <class Replica>
int check_data_parallel(int argc, char** argv, const char* lab, DataParallelReference reference) {
  return check_data_parallel(
      argc, argv, lab, reference, [](const World& world, torch::nn::Sequential& model) {
        auto replica = std::make_shared<Replica>(world, model);
        return DataParallelStep(
            [replica](const Batch& global_batch) { return replica->train_step(global_batch); });
      });
}

/// A lab's all-reduce: sums `buffer` (1-D, contiguous, float, its length a multiple of the number
/// of ranks) in place over the ranks, every rank calling it with its own buffer.
using AllReduce = std::function<void(const World& world, const at::Tensor& buffer)>;

/// Runs the collective lab `lab` on the launched ranks and checks it against the library's
/// all-reduce (the sums to 1e-6) and the traffic of a ring (each rank sends 2(P - 1) messages of
/// n/P elements); returns main's exit code.
int check_all_reduce(int argc, char** argv, const char* lab, const AllReduce& all_reduce);

}  // namespace lab
