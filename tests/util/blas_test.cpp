// The BLAS report: classification of Debian's BLAS layouts, detection of the library really
// loaded (in a worker process that loads libblas.so.3 as LibTorch does), and the warning.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "mpp/util/blas.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {
constexpr const char* system_blas = "/usr/lib/x86_64-linux-gnu/libblas.so.3";
}

// Loads the system BLAS the way LibTorch's libtorch_cpu.so does, then reports on it.
MPP_TEST_WORKER("blas_report") {
  std::printf("before: %s", mpp::util::blas_report().c_str());
  if (!::dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "cannot load libblas.so.3: %s\n", ::dlerror());
    return 1;
  }
  const auto info = mpp::util::detect_blas();
  std::printf("kind=%d\nreal=%s\nthreads=%d\n", static_cast<int>(info.kind), info.real_path.c_str(),
              info.threads);
  mpp::util::print_blas_report();
  return 0;
}

TEST_SUITE("util") {
  TEST_CASE("Debian's BLAS layouts are classified by their real path") {
    using mpp::util::BlasKind;
    using mpp::util::classify_blas;
    auto openmp = classify_blas("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
    CHECK(openmp.kind == BlasKind::openblas);
    CHECK(openmp.variant == "openmp");
    auto pthread = classify_blas("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3");
    CHECK(pthread.kind == BlasKind::openblas);
    CHECK(pthread.variant == "pthread");
    auto reference = classify_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3");
    CHECK(reference.kind == BlasKind::reference);
    CHECK(reference.is_reference());
    CHECK(classify_blas("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3").kind ==
          BlasKind::blis);
    CHECK(classify_blas("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3").kind == BlasKind::atlas);
    CHECK(classify_blas("/opt/intel/lib/libmkl_rt.so").kind == BlasKind::mkl);
    CHECK(classify_blas("").kind == BlasKind::none);
  }

  TEST_CASE("the report is one line, and a loud warning for the reference BLAS") {
    auto openblas =
        mpp::util::classify_blas("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
    const auto good = mpp::util::blas_report(openblas, 1);
    CHECK(good.rfind("BLAS: OpenBLAS (openmp) from ", 0) == 0);
    CHECK(good.find("threads per rank: 1 (OMP_NUM_THREADS=") != std::string::npos);
    CHECK(good.find("WARNING") == std::string::npos);
    CHECK(std::count(good.begin(), good.end(), '\n') == 1);

    auto reference = mpp::util::classify_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3");
    const auto bad = mpp::util::blas_report(reference, 1);
    CHECK(bad.rfind("BLAS: reference BLAS (netlib)", 0) == 0);
    CHECK(bad.find("WARNING: the reference BLAS is active") != std::string::npos);
    CHECK(bad.find("apt-get install libopenblas0-openmp") != std::string::npos);
  }

  TEST_CASE("the BLAS loaded in a process is the one the alternatives system selects") {
    REQUIRE_MESSAGE(std::filesystem::exists(system_blas),
                    "no system BLAS: run scripts/setup (libopenblas0-openmp)");
    const auto selected =
        mpp::util::classify_blas(std::filesystem::canonical(system_blas).string());
    const auto world = mpp::test::run_world(1, "blas_report");
    REQUIRE_MESSAGE(world.ok(), world.report());
    const auto& out = world.output(0);
    INFO(out);
    CHECK(out.find("before: BLAS: none loaded") != std::string::npos);
    CHECK(out.find("kind=" + std::to_string(static_cast<int>(selected.kind)) + "\n") !=
          std::string::npos);
    CHECK(out.find("real=" + selected.real_path + "\n") != std::string::npos);
    if (selected.kind == mpp::util::BlasKind::openblas) {
      // The launcher's one-thread default reaches OpenBLAS itself.
      CHECK(out.find("threads=1\n") != std::string::npos);
      CHECK(out.find("\nBLAS: OpenBLAS (" + selected.variant + ") 0.") != std::string::npos);
      CHECK(out.find("threads per rank: 1") != std::string::npos);
    } else if (selected.is_reference()) {
      CHECK(out.find("WARNING: the reference BLAS is active") != std::string::npos);
    }
  }
}
