#pragma once
// Every schedule policy tag: the built-in ones (one header each, listed in builtin.hpp) and
// hand-written tables (custom.hpp).
#include "mpp/schedule/builtin.hpp"
#include "mpp/schedule/concepts.hpp"
#include "mpp/schedule/custom.hpp"
