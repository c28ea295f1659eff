// Must not compile: Recompute refines a partition, and int is none.
#include "mpp/partition/recompute.hpp"
int main() { return mpp::Recompute<int>::recompute ? 0 : 1; }
