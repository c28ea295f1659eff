// Must not compile: a pipeline of zero ranks.
#include "mpp/partition/uniform.hpp"
int main() { return mpp::Uniform<0>::ranks; }
