#pragma once
// The mark of a part of a lab that is still to be written. The skeletons call lab::unfinished()
// where the learner's code goes, with a sentence saying what must hold there; the call throws,
// and the lab's main (lab::guarded_main) prints "<lab>: unfinished: <that sentence>" and exits
// with code 1. Replace the call with code that makes the sentence hold.
#include <stdexcept>
#include <string>

namespace lab {

/// What lab::unfinished() throws.
class Unfinished : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Stops the lab here: `what` says what must hold in place of this call.
[[noreturn]] inline void unfinished(const std::string& what) {
  throw Unfinished("unfinished: " + what);
}

}  // namespace lab
