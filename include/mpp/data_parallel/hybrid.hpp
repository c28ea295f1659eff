#pragma once
// DP x PP: a Pipeline per replica, and the replicas of each stage averaging their gradients.
//
//   mpp::DataPipelineMesh mesh(world, /*pipeline_degree=*/2);          // 4 ranks = 2 x 2
//   mpp::DataParallelPipeline<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>,
//   mpp::Async<mpp::Gloo>>>
//       hybrid(mesh, mpp::MlpModel{cfg});
//   torch::optim::Adam opt(hybrid.parameters(), 1e-3);
//   opt.zero_grad();
//   double loss = hybrid.train_step(x, y, mse);   // this replica's shard: x on stage 0, y last
//   opt.step();
//
// The pipeline step accumulates this stage's gradients over the replica's micro-batches; then
// one coalesced all-reduce per stage (over the mesh's data group) averages them across the
// replicas. Each stage's group reduces only its own layers, and the groups of different stages
// run their reductions at the same time.
#include <ATen/ATen.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpp/data_parallel/mesh.hpp"
#include "mpp/data_parallel/naive_dp.hpp"
#include "mpp/error.hpp"
#include "mpp/pipeline.hpp"

namespace mpp {

/// DP x PP: one PipelineT per replica of a DataPipelineMesh; after each step every stage's
/// gradients are averaged over its data group with GradComm (by default blocking, over the
/// pipeline's backend). The mesh's groups, the pipeline's and GradComm share one backend.
template <class PipelineT, comm_policy GradComm = Blocking<typename PipelineT::comm_type::backend>>
class DataParallelPipeline {
 public:
  /// The backend of the mesh, the pipeline and the gradient reduction.
  using backend = typename PipelineT::comm_type::backend;
  static_assert(std::is_same_v<typename GradComm::backend, backend>,
                "mpp: DataParallelPipeline<PipelineT, GradComm>: GradComm's backend must be the "
                "pipeline's, since both run over the groups of one mesh; use "
                "Blocking<B> or Async<B> with the B of the pipeline's comm policy");

  /// The Pipeline type of every replica.
  using pipeline_type = PipelineT;
  /// Pipeline ranks per replica (the mesh's pipeline degree).
  static constexpr int ranks = PipelineT::ranks;

  /// A collective over the mesh's world. The mesh's pipeline degree must be the pipeline's
  /// number of ranks.
  template <class Model>
  DataParallelPipeline(const DataPipelineMesh<backend>& mesh, const Model& model)
      : mesh_(&mesh),
        pipe_(checked_group(mesh), model),
        grads_(stage_parameters(pipe_), mesh.data_group()) {}

  /// One step of this replica's pipeline on its shard, then the stage's gradients averaged
  /// over the replicas. Returns the mean loss over every replica's shard (the global batch's
  /// mean when the shards have equal sizes).
  template <class LossFn>
  double train_step(const at::Tensor& inputs, const at::Tensor& targets, LossFn&& loss_fn) {
    const double local = pipe_.train_step(inputs, targets, std::forward<LossFn>(loss_fn));
    grads_.sync_gradients();
    at::Tensor loss = at::full({1}, local, at::kDouble);
    mesh_->data_group().all_reduce_mean(loss);
    return loss.item<double>();
  }

  /// This rank's stage parameters, for the optimizer.
  std::vector<at::Tensor> parameters() const { return pipe_.parameters(); }
  /// This replica's pipeline.
  PipelineT& pipeline() { return pipe_; }
  /// The mesh it was built on; it is kept by reference and must outlive this object.
  const DataPipelineMesh<backend>& mesh() const { return *mesh_; }
  /// Time spent averaging gradients across replicas since construction.
  double grad_sync_seconds() const { return grads_.comm_seconds(); }

 private:
  static Group<backend> checked_group(const DataPipelineMesh<backend>& mesh) {
    if (mesh.pipeline_degree() != ranks)
      throw InvalidArgument("mpp: " + PipelineT::name() + " runs on " + std::to_string(ranks) +
                            " ranks but the DP x PP mesh was cut into pipelines of " +
                            std::to_string(mesh.pipeline_degree()) +
                            "; build the mesh with pipeline degree " + std::to_string(ranks));
    return mesh.pipeline_group();
  }

  static std::vector<NamedTensor> stage_parameters(const PipelineT& pipe) {
    std::vector<NamedTensor> params;
    for (const auto& piece : pipe.pieces())
      for (const auto& item : piece.module->named_parameters())
        params.push_back({"layers[" + std::to_string(piece.layers.begin) + "," +
                              std::to_string(piece.layers.end) + ")." + item.key(),
                          item.value()});
    return params;
  }

  const DataPipelineMesh<backend>* mesh_;
  PipelineT pipe_;
  NaiveDP<GradComm, Coalesced> grads_;
};

}  // namespace mpp
