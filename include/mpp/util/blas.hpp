#pragma once
// Which BLAS this process really runs with, and how many threads it may use.
//
// Debian's LibTorch calls whatever `libblas.so.3` the alternatives system points at. With the
// reference (netlib) BLAS a 1024x1024 SGEMM is ~17x slower than with OpenBLAS, which silently
// ruins every timing; so demos and benchmarks print one line from blas_report() and a loud
// warning when the reference BLAS is active. Standard library and glibc only (no LibTorch):
// callers pass LibTorch's thread count in if they want it shown.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

/// Helpers that need neither LibTorch nor the rest of mpp.
namespace mpp::util {

/// Which BLAS implementation a library file is.
enum class BlasKind { none, openblas, reference, blis, mkl, atlas, other };

/// The BLAS a process runs with, from detect_blas() or classify_blas().
struct BlasInfo {
  BlasKind kind = BlasKind::none;  ///< The implementation.
  /// as the dynamic linker loaded it (often the alternatives symlink)
  std::string loaded_path;
  std::string real_path;  ///< the file behind the symlinks
  std::string variant;    ///< OpenBLAS/BLIS threading: "openmp", "pthread", "serial" or ""
  std::string config;     ///< openblas_get_config() when available
  int threads = -1;       ///< the library's own thread count when it can tell, else -1

  /// True for the slow reference (netlib) BLAS.
  [[nodiscard]] bool is_reference() const { return kind == BlasKind::reference; }
  /// The implementation's name for people: "OpenBLAS", "reference BLAS (netlib)", ...
  [[nodiscard]] std::string name() const {
    switch (kind) {
      case BlasKind::none:
        return "none loaded";
      case BlasKind::openblas:
        return "OpenBLAS";
      case BlasKind::reference:
        return "reference BLAS (netlib)";
      case BlasKind::blis:
        return "BLIS";
      case BlasKind::mkl:
        return "Intel MKL";
      case BlasKind::atlas:
        return "ATLAS";
      case BlasKind::other:
        return "unrecognised BLAS";
    }
    return "unrecognised BLAS";
  }
};

/// Classifies a BLAS by the real path of the library (Debian's layout: one directory per
/// implementation under `/usr/lib/<triplet>/`, selected by update-alternatives).
inline BlasInfo classify_blas(std::string_view real_path) {
  BlasInfo info;
  info.real_path = std::string(real_path);
  const auto has = [&](std::string_view part) { return real_path.find(part) != std::string::npos; };
  if (real_path.empty()) return info;
  if (has("openblas")) {
    info.kind = BlasKind::openblas;
  } else if (has("blis")) {
    info.kind = BlasKind::blis;
  } else if (has("mkl")) {
    info.kind = BlasKind::mkl;
  } else if (has("atlas")) {
    info.kind = BlasKind::atlas;
  } else if (has("/blas/libblas.so") || has("libblas.so")) {
    // Debian installs netlib's reference implementation as blas/libblas.so.3; a bare
    // libblas.so.3 that is no symlink into an optimised implementation is the same thing.
    info.kind = BlasKind::reference;
  } else {
    info.kind = BlasKind::other;
  }
  for (std::string_view variant : {"openmp", "pthread", "serial"})
    if (has(variant)) info.variant = std::string(variant);
  return info;
}

namespace detail {

inline std::vector<std::string> loaded_objects() {
  std::vector<std::string> paths;
  ::dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* out) {
        if (object->dlpi_name && *object->dlpi_name)
          static_cast<std::vector<std::string>*>(out)->emplace_back(object->dlpi_name);
        return 0;
      },
      &paths);
  return paths;
}

inline std::string real_path_of(const std::string& path) {
  std::error_code error;
  auto resolved = std::filesystem::canonical(path, error);
  return error ? path : resolved.string();
}

inline std::string basename_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

}  // namespace detail

/// The BLAS loaded in this process: the object named libblas.so.* (what LibTorch links), else an
/// implementation loaded under its own name (libopenblas, libmkl, libblis).
inline BlasInfo detect_blas() {
  const auto objects = detail::loaded_objects();
  std::string chosen;
  for (const auto& path : objects)
    if (detail::basename_of(path).rfind("libblas.so", 0) == 0) chosen = path;
  if (chosen.empty())
    for (const auto& path : objects) {
      const auto base = detail::basename_of(path);
      if (base.rfind("libopenblas", 0) == 0 || base.rfind("libmkl_rt", 0) == 0 ||
          base.rfind("libblis", 0) == 0)
        chosen = path;
    }
  if (chosen.empty()) return BlasInfo{};

  BlasInfo info = classify_blas(detail::real_path_of(chosen));
  info.loaded_path = chosen;
  // OpenBLAS answers for itself; ask the loaded object, without loading anything new.
  if (void* handle = ::dlopen(chosen.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    using ConfigFn = char* (*)();
    using IntFn = int (*)();
    if (auto config = reinterpret_cast<ConfigFn>(::dlsym(handle, "openblas_get_config"))) {
      info.kind = BlasKind::openblas;
      info.config = config();
    }
    if (auto threads = reinterpret_cast<IntFn>(::dlsym(handle, "openblas_get_num_threads")))
      info.threads = threads();
    if (auto parallel = reinterpret_cast<IntFn>(::dlsym(handle, "openblas_get_parallel"))) {
      const int mode = parallel();  // OpenBLAS: 0 sequential, 1 pthreads, 2 OpenMP
      info.variant = mode == 2 ? "openmp" : mode == 1 ? "pthread" : "serial";
    }
    ::dlclose(handle);
  }
  return info;
}

/// "BLAS: OpenBLAS (openmp) 0.3.21 ... | threads per rank: 1 (OMP_NUM_THREADS=1, ...)", followed
/// by a loud warning when the reference BLAS is active. `threads_per_rank` is the caller's
/// intra-op thread count (e.g. torch::get_num_threads()); -1 shows what the BLAS reports.
inline std::string blas_report(const BlasInfo& info, int threads_per_rank = -1) {
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(name) + "=" + (value ? value : "unset");
  };
  std::string line = "BLAS: " + info.name();
  if (!info.variant.empty()) line += " (" + info.variant + ")";
  if (!info.config.empty()) {  // "OpenBLAS 0.3.21 NO_LAPACKE ...": the version is enough here
    const auto first_space = info.config.find(' ');
    if (first_space != std::string::npos)
      line += " " + info.config.substr(first_space + 1,
                                       info.config.find(' ', first_space + 1) - first_space - 1);
  }
  if (!info.real_path.empty()) line += " from " + info.real_path;
  const int threads = threads_per_rank > 0 ? threads_per_rank : info.threads;
  line += ", threads per rank: " + (threads > 0 ? std::to_string(threads) : std::string("?"));
  line += " (" + env("OMP_NUM_THREADS") + ", " + env("OPENBLAS_NUM_THREADS") + ")\n";
  if (info.is_reference()) {
    line +=
        "WARNING: **************************************************************************\n"
        "WARNING: the reference BLAS is active: matrix products run ~17x slower than with\n"
        "WARNING: OpenBLAS and every timing below is meaningless. Fix: run scripts/setup, or\n"
        "WARNING:   apt-get install libopenblas0-openmp\n"
        "WARNING:   update-alternatives --config libblas.so.3-x86_64-linux-gnu\n"
        "WARNING: **************************************************************************\n";
  }
  return line;
}

/// blas_report() of the BLAS this process runs with (detect_blas()).
inline std::string blas_report(int threads_per_rank = -1) {
  return blas_report(detect_blas(), threads_per_rank);
}

/// Prints blas_report() to `out` (stdout by default).
inline void print_blas_report(int threads_per_rank = -1, std::FILE* out = stdout) {
  const auto text = blas_report(threads_per_rank);
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

}  // namespace mpp::util
