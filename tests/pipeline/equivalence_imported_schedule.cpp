// A schedule that comes from elsewhere: DualPipeV's table in PyTorch's action CSV format
// (tests/schedule/data/dualpipev_p4_m10.csv: V placement, OVERLAP_F_B pairs), turned into a
// header by `mpp-schedule --import-csv ... --emit-cpp` at build time. The header proves the table
// by static_assert; here it trains on 4 ranks, for every comm policy and partition, to the
// monolith's parameters.
#include <doctest/doctest.h>

#include "dualpipev_p4_m10.hpp"
#include "pipeline/equivalence.hpp"

static_assert(mpp::schedule<imported::ImportedDualPipeV>);
static_assert(imported::ImportedDualPipeV::micro_batches == 10);
static_assert(imported::ImportedDualPipeV::chunks_per_rank == 2);
// The placement the file names: rank r holds stages r and 7 - r.
static_assert(imported::ImportedDualPipeV::table(4).placement == mpp::v_shape_placement(4, 2));
// The same figures as mpp's own DualPipeV<10>.
static_assert(mpp::verify<imported::ImportedDualPipeV>(4, mpp::CommSemantics::buffered).makespan ==
              mpp::verify<mpp::DualPipeV<10>>(4, mpp::CommSemantics::buffered).makespan);

MPP_PIPELINE_EQUIVALENCE_AS("Custom (DualPipeV from PyTorch's CSV)", 4, imported::ImportedDualPipeV)
