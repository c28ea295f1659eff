#pragma once
// Checkpoints written by several ranks at once: each rank (a pipeline stage) writes its own state
// file, rank 0 writes the manifest that lists them all, and the directory appears whole or not at
// all. The result is read by read_checkpoint() like any other checkpoint.
//
// The ranks meet through the file system (a shared one on a cluster, as every rank writes into
// the same directory) and through two barriers: rank 0 prepares the temporary directory; every rank
// writes its file and a small entry next to it; rank 0 folds the entries into manifest.json and
// renames the directory into place; nobody continues before that is done.
#include <filesystem>
#include <fstream>
#include <string>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/comm/process_group.hpp"

namespace mpp::checkpoint {

/// Writes `mine` (this rank's state file, a name of its own) into the checkpoint `dir` together
/// with every other rank of `group`; rank 0 adds `meta` as the manifest's top level. Every rank
/// must call it. Throws CheckpointError when a rank cannot see the directory or names collide.
inline void write_sharded_checkpoint(const std::filesystem::path& dir, const ProcessGroup& group,
                                     const StateFile& mine, const nlohmann::json& meta) {
  namespace fs = std::filesystem;
  const fs::path tmp = dir.string() + ".tmp";
  std::error_code ec;
  if (group.rank() == 0) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
  }
  group.barrier();
  if (!fs::is_directory(tmp))
    throw CheckpointError("mpp: rank " + std::to_string(group.rank()) + " cannot see " +
                          tmp.string() +
                          ": every rank of a sharded checkpoint must write to the same (shared) "
                          "directory");
  const auto encoded =
      encode_state_file(mine, meta.contains("progress") ? meta["progress"] : nlohmann::json{});
  detail::write_bytes(tmp / mine.name, encoded.bytes);
  {
    std::ofstream entry(tmp / (mine.name + ".entry"));
    entry << nlohmann::json{{"name", mine.name}, {"entry", encoded.entry}}.dump();
  }
  group.barrier();
  if (group.rank() == 0) {
    nlohmann::json manifest = meta;
    manifest["format"] = format_name;
    manifest["files"] = nlohmann::json::object();
    for (const auto& item : fs::directory_iterator(tmp)) {
      if (item.path().extension() != ".entry") continue;
      std::ifstream in(item.path());
      const auto entry = nlohmann::json::parse(in);
      manifest["files"][entry.at("name").get<std::string>()] = entry.at("entry");
      in.close();
      fs::remove(item.path());
    }
    if (manifest["files"].size() != static_cast<std::size_t>(group.size()))
      throw CheckpointError("mpp: sharded checkpoint " + dir.string() + " got " +
                            std::to_string(manifest["files"].size()) + " state files from " +
                            std::to_string(group.size()) +
                            " ranks; give every rank its own file name");
    std::ofstream(tmp / "manifest.json") << manifest.dump(2) << '\n';
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec)
      throw CheckpointError("mpp: cannot move checkpoint into place at " + dir.string() + ": " +
                            ec.message());
  }
  group.barrier();
}

}  // namespace mpp::checkpoint
