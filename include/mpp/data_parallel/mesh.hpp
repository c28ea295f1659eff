#pragma once
// The 2-D mesh of DP x PP: world = data-parallel degree x pipeline degree. Consecutive ranks form
// one pipeline replica (so a replica's stages sit close, e.g. on one node); the ranks holding the
// same stage in every replica form that stage's data-parallel group.
//
//   4 ranks, pipeline degree 2:        stage 0   stage 1
//                          replica 0   rank 0    rank 1     <- pipeline group {0, 1}
//                          replica 1   rank 2    rank 3     <- pipeline group {2, 3}
//                                      data {0,2} data {1,3}
//
// Each rank runs its stage of its replica's pipeline, then all-reduces its stage's gradients with
// the same stage of the other replicas.
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/comm/process_group.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// The ranks of the world cut into DP x PP: pipeline groups of consecutive ranks, and per stage the
/// data group of the ranks that run it in every replica, all over the world's backend.
template <comm_backend Backend>
class DataPipelineMesh {
 public:
  /// The backend of the world and of every group of the mesh.
  using backend = Backend;

  /// A collective over `world`: every rank builds the mesh with the same pipeline degree.
  DataPipelineMesh(const Group<Backend>& world, int pipeline_degree)
      : pipeline_degree_(pipeline_degree) {
    if (pipeline_degree < 1)
      throw InvalidArgument("mpp: DP x PP mesh needs a pipeline degree >= 1 (got " +
                            std::to_string(pipeline_degree) + ")");
    if (world.size() % pipeline_degree != 0)
      throw InvalidArgument(
          "mpp: DP x PP mesh needs the world size to be a multiple of the pipeline degree, but " +
          std::to_string(world.size()) + " ranks cannot be cut into pipelines of " +
          std::to_string(pipeline_degree) + " ranks; launch a multiple of " +
          std::to_string(pipeline_degree) + " ranks or change the pipeline degree");
    data_degree_ = world.size() / pipeline_degree;
    replica_ = world.rank() / pipeline_degree;
    pipeline_rank_ = world.rank() % pipeline_degree;
    std::vector<std::vector<int>> pipelines(static_cast<std::size_t>(data_degree_));
    std::vector<std::vector<int>> peers(static_cast<std::size_t>(pipeline_degree));
    for (int r = 0; r < world.size(); ++r) {
      pipelines[static_cast<std::size_t>(r / pipeline_degree)].push_back(r);
      peers[static_cast<std::size_t>(r % pipeline_degree)].push_back(r);
    }
    pipeline_group_ = world.split(pipelines);
    data_group_ = world.split(peers);
    // A rank returns from connecting a group once its own links are up, possibly before a slower
    // peer's are; if it then dropped the group (an error right after construction) that peer's
    // connect would fail. Nobody leaves the constructor before everyone is connected.
    world.barrier();
  }

  /// Ranks per pipeline replica (the size of a pipeline group).
  int pipeline_degree() const { return pipeline_degree_; }
  /// Number of pipeline replicas (the size of a data group).
  int data_degree() const { return data_degree_; }
  /// Which pipeline replica this rank belongs to, in [0, data_degree()).
  int replica() const { return replica_; }
  /// This rank's rank in its replica's pipeline, in [0, pipeline_degree()).
  int pipeline_rank() const { return pipeline_rank_; }
  /// The ranks of this rank's pipeline replica (rank i of it is pipeline rank i).
  const Group<Backend>& pipeline_group() const { return pipeline_group_; }
  /// The ranks that hold this rank's stages in every replica (rank i of it is in replica i).
  const Group<Backend>& data_group() const { return data_group_; }

 private:
  int pipeline_degree_;
  int data_degree_ = 1;
  int replica_ = 0;
  int pipeline_rank_ = 0;
  Group<Backend> pipeline_group_;
  Group<Backend> data_group_;
};

/// `DataPipelineMesh mesh(world, 2)` is a mesh over `world`'s backend.
template <comm_backend Backend>
DataPipelineMesh(const Group<Backend>&, int) -> DataPipelineMesh<Backend>;

}  // namespace mpp
