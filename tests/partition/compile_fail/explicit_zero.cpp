// Must not compile: a stage with zero layers.
#include "mpp/partition/explicit.hpp"
int main() { return mpp::Explicit<4, 0, 4>::pieces; }
