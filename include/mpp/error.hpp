#pragma once
// The base of every error mpp throws. Each error is also the standard exception its kind calls
// for (a bad argument is a std::invalid_argument, a failed operation a std::runtime_error), so
// code that catches the standard types keeps working, and code that wants to tell mpp's errors
// from the rest catches mpp::Error:
//
//   try {
//     run();
//   } catch (const mpp::Error& e) {   // a rule broken or an operation failed, with the fix
//     std::fprintf(stderr, "%s\n", e.what());
//     return 1;
//   }
//
// Every message starts with "mpp: ", names the rule that was broken and says how to fix it.
// Standard library only.
#include <stdexcept>

namespace mpp {

/// What every mpp error derives from: catch it to handle any of them. It is not itself a
/// std::exception (each error is one through its standard kind), so that catching
/// std::exception stays unambiguous.
class Error {
 public:
  virtual ~Error() = default;
  /// The message: the rule that was broken, or the operation that failed, and the fix.
  virtual const char* what() const noexcept = 0;

 protected:
  /// Only as a base of an error.
  Error() = default;
  /// Copied with the error that derives from it.
  Error(const Error&) = default;
  /// Assigned with the error that derives from it.
  Error& operator=(const Error&) = default;
};

/// An mpp error of the standard kind `Std` (std::invalid_argument, std::runtime_error, ...).
template <class Std>
class ErrorOfKind : public Std, public Error {
 public:
  using Std::Std;
  /// The message (one overrider for both bases).
  const char* what() const noexcept override { return Std::what(); }
};

/// An argument breaks a rule the call states (a rank outside the group, a bad size).
using InvalidArgument = ErrorOfKind<std::invalid_argument>;
/// An object used out of its state (an empty handle, a rank outside its group).
using LogicError = ErrorOfKind<std::logic_error>;
/// An index outside a container's range.
using OutOfRange = ErrorOfKind<std::out_of_range>;
/// An operation failed for a reason outside the call (a file, a peer, the data).
using RuntimeError = ErrorOfKind<std::runtime_error>;

}  // namespace mpp
