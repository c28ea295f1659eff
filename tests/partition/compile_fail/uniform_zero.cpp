// Must not compile: a pipeline of zero stages.
#include "mpp/partition/uniform.hpp"
int main() { return mpp::Uniform<0>::stages; }
