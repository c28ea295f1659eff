// Must not compile: a stage is recomputed in at least one segment.
#include "mpp/partition/recompute.hpp"
#include "mpp/partition/uniform.hpp"
int main() { return mpp::Recompute<mpp::Uniform<2>, 0>::segments; }
