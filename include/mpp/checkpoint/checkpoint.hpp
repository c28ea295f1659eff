#pragma once
// Checkpoints that are either loaded whole or refused, and that Python opens with torch.load.
//
// A checkpoint is a directory:
//   manifest.json   format, the config it was written with, training progress, and for every
//                   state file its size and CRC-32, and for every tensor its shape and dtype
//   state.pt        (or one file per pipeline stage) written by torch::pickle_save: the zip
//                   archive torch.save writes, so `torch.load("state.pt")` returns a dict
//                   {"model": {name: tensor}, "optimizer": {...}, "progress": {...}, ...}
//
// Writing goes to a temporary sibling directory that is renamed into place, so a crash leaves
// either the old checkpoint or the new one, never half of one. Reading checks everything --
// manifest, sizes, checksums, the config, every tensor's name, shape and dtype -- before the
// first byte of the model or optimizer is touched.
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/error.hpp"

namespace mpp::checkpoint {

/// Every refusal to load (or failure to write) a checkpoint.
struct CheckpointError : RuntimeError {
  using RuntimeError::RuntimeError;
};

/// The manifest's "format": a reader refuses any other.
inline constexpr const char* format_name = "mpp-checkpoint/1";

/// Where a run stands: resuming at (epoch, position) replays the same batches.
struct Progress {
  std::int64_t step = 0;      ///< optimizer steps done
  std::int64_t epoch = 0;     ///< current epoch (0-based)
  std::int64_t position = 0;  ///< batches of this epoch already consumed
  /// Field by field.
  bool operator==(const Progress&) const = default;
};

namespace detail {

inline std::uint32_t crc32(const std::vector<char>& bytes) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (char ch : bytes) crc = table[(crc ^ static_cast<unsigned char>(ch)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;  // same value as Python's zlib.crc32
}

inline std::vector<char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("mpp: cannot open checkpoint file " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    throw CheckpointError("mpp: cannot write checkpoint file " + path.string() +
                          " (disk full or no permission?)");
}

/// LibTorch's optimizers key per-parameter state by the printed TensorImpl address.
inline std::string state_key(const torch::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

inline std::string dtype_name(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type()));
}

inline nlohmann::json tensor_entry(const torch::Tensor& t) {
  return {{"shape", t.sizes().vec()}, {"dtype", dtype_name(t)}};
}

}  // namespace detail

/// One state file of a checkpoint: a flat map of named tensors per group ("model", "optimizer")
/// plus the generic extras every file carries.
struct StateFile {
  /// File name inside the checkpoint directory: "state.pt", "stage_1.pt", ... "state.pt",
  /// "stage_1.pt", ...
  std::string name;
  /// Group name -> tensor name -> tensor.
  std::map<std::string, std::map<std::string, torch::Tensor>> groups;
};

/// Parameters (or any tensors) by name.
using NamedTensors = std::map<std::string, torch::Tensor>;

/// One state file as bytes (torch.save's zip format) and its manifest entry.
struct EncodedFile {
  std::vector<char> bytes;  ///< What goes into the file.
  nlohmann::json entry;     ///< {"bytes", "crc32", "tensors"}
};

/// Pickles `file`; the `progress` keys are copied into the dict for readers without the manifest.
inline EncodedFile encode_state_file(const StateFile& file, const nlohmann::json& progress) {
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [group, named] : file.groups) {
    c10::Dict<std::string, torch::Tensor> dict;
    for (const auto& [name, tensor] : named) {
      // Own storage, contiguous: views of a larger buffer would drag it into the file.
      dict.insert(name, tensor.detach().contiguous().clone());
      tensors[group + "/" + name] = detail::tensor_entry(tensor);
    }
    root.insert(group, dict);
  }
  root.insert("format", std::string(format_name));
  if (progress.is_object())
    for (const auto& [key, value] : progress.items()) root.insert(key, value.get<std::int64_t>());
  EncodedFile out;
  out.bytes = torch::pickle_save(root);
  out.entry = {
      {"bytes", out.bytes.size()}, {"crc32", detail::crc32(out.bytes)}, {"tensors", tensors}};
  return out;
}

/// Writes `files` and the manifest into `dir` atomically (temp directory, then rename).
/// `meta` is stored in the manifest as is (config, progress, ...).
inline void write_checkpoint(const std::filesystem::path& dir, const std::vector<StateFile>& files,
                             const nlohmann::json& meta) {
  namespace fs = std::filesystem;
  const fs::path tmp = dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    throw CheckpointError("mpp: cannot create checkpoint directory " + tmp.string() + ": " +
                          ec.message());
  nlohmann::json manifest = meta;
  manifest["format"] = format_name;
  manifest["files"] = nlohmann::json::object();
  for (const auto& file : files) {
    const auto encoded =
        encode_state_file(file, meta.contains("progress") ? meta["progress"] : nlohmann::json{});
    detail::write_bytes(tmp / file.name, encoded.bytes);
    manifest["files"][file.name] = encoded.entry;
  }
  {
    std::ofstream out(tmp / "manifest.json");
    out << manifest.dump(2) << '\n';
    out.close();
    if (!out) throw CheckpointError("mpp: cannot write " + (tmp / "manifest.json").string());
  }
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec)
    throw CheckpointError("mpp: cannot move checkpoint into place at " + dir.string() + ": " +
                          ec.message());
}

/// A checkpoint read and verified: manifest plus each file's tensors by group.
struct LoadedCheckpoint {
  nlohmann::json manifest;                 ///< manifest.json as written.
  std::map<std::string, StateFile> files;  ///< by file name
};

/// Reads `dir`, checking the manifest, sizes and checksums and decoding every file. Throws
/// CheckpointError naming the file and the rule; returns only a fully consistent checkpoint.
inline LoadedCheckpoint read_checkpoint(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path manifest_path = dir / "manifest.json";
  const std::string refuse = "mpp: refusing checkpoint " + dir.string() + ": ";
  const std::string fix = "; resume from another checkpoint or start a fresh run";
  if (!fs::is_directory(dir)) throw CheckpointError(refuse + "no such directory" + fix);
  if (!fs::exists(manifest_path))
    throw CheckpointError(refuse + "manifest.json is missing (the save did not finish)" + fix);
  LoadedCheckpoint loaded;
  try {
    std::ifstream in(manifest_path);
    loaded.manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(refuse + "manifest.json is not valid JSON (" + e.what() + ")" + fix);
  }
  const auto& manifest = loaded.manifest;
  if (!manifest.is_object() || manifest.value("format", std::string{}) != format_name)
    throw CheckpointError(refuse + "manifest format is not " + std::string(format_name) + fix);
  if (!manifest.contains("files") || !manifest["files"].is_object() || manifest["files"].empty())
    throw CheckpointError(refuse + "manifest lists no state files" + fix);
  for (const auto& [name, entry] : manifest["files"].items()) {
    const fs::path path = dir / name;
    if (!fs::exists(path)) throw CheckpointError(refuse + name + " is missing" + fix);
    const auto expected_bytes = entry.at("bytes").get<std::uint64_t>();
    const auto actual_bytes = static_cast<std::uint64_t>(fs::file_size(path));
    if (actual_bytes != expected_bytes)
      throw CheckpointError(refuse + name + " has " + std::to_string(actual_bytes) +
                            " bytes but the manifest says " + std::to_string(expected_bytes) +
                            " (truncated or overwritten)" + fix);
    const std::vector<char> bytes = detail::read_bytes(path);
    const auto crc = detail::crc32(bytes);
    if (crc != entry.at("crc32").get<std::uint32_t>())
      throw CheckpointError(refuse + name + " fails its CRC-32 check (" + std::to_string(crc) +
                            " != " + std::to_string(entry.at("crc32").get<std::uint32_t>()) +
                            "): the file is corrupt" + fix);
    torch::IValue root;
    try {
      root = torch::pickle_load(bytes);
    } catch (const std::exception& e) {
      throw CheckpointError(refuse + name + " cannot be decoded: " + e.what() + fix);
    }
    if (!root.isGenericDict()) throw CheckpointError(refuse + name + " does not hold a dict" + fix);
    StateFile file{name, {}};
    nlohmann::json seen = nlohmann::json::object();
    for (const auto& item : root.toGenericDict()) {
      if (!item.value().isGenericDict()) continue;  // scalars: format, progress copies
      auto& group = file.groups[item.key().toStringRef()];
      for (const auto& tensor_item : item.value().toGenericDict()) {
        const auto& tensor = tensor_item.value().toTensor();
        group[tensor_item.key().toStringRef()] = tensor;
        seen[item.key().toStringRef() + "/" + tensor_item.key().toStringRef()] =
            detail::tensor_entry(tensor);
      }
    }
    if (seen != entry.at("tensors"))
      throw CheckpointError(refuse + name + " holds tensors that differ from its manifest entry" +
                            fix);
    loaded.files.emplace(name, std::move(file));
  }
  return loaded;
}

// ---- The training state of one model + AdamW optimizer ------------------------------------

/// Named parameters as a map (what goes into the "model" group).
inline NamedTensors model_tensors(const torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) out[item.key()] = item.value();
  return out;
}

/// AdamW's per-parameter state, by parameter name ("<name>.exp_avg", ".exp_avg_sq", ".step").
inline NamedTensors adamw_tensors(const NamedTensors& params, torch::optim::AdamW& optimizer) {
  NamedTensors out;
  auto& state = optimizer.state();
  for (const auto& [name, param] : params) {
    auto it = state.find(detail::state_key(param));
    if (it == state.end()) continue;  // no step taken on this parameter yet (or a buffer)
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    out[name + ".exp_avg"] = s.exp_avg();
    out[name + ".exp_avg_sq"] = s.exp_avg_sq();
    out[name + ".step"] = torch::tensor(s.step(), torch::kLong);
  }
  return out;
}

/// The default CPU generator's state (dropout masks draw from it).
inline torch::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

/// Sets the default CPU generator's state, as cpu_rng_state() returned it.
inline void set_cpu_rng_state(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

/// Checks that `file` matches `current` exactly (every parameter present with its shape and
/// dtype, nothing extra, optimizer state complete or absent, the generator state there if the
/// file has one) without changing anything. Throws CheckpointError otherwise. `current` names
/// the tensors to fill (a stage's parameters under the whole model's names).
inline void check_training_state(const StateFile& file, const NamedTensors& current,
                                 const std::string& origin, const std::string& rng_key = "cpu") {
  const std::string refuse = "mpp: refusing checkpoint " + origin + ": ";
  const std::string fix =
      "; it was written for a different model -- use the config it was "
      "written with, or start a fresh run";
  auto group = [&](const char* name) -> const std::map<std::string, torch::Tensor>& {
    auto it = file.groups.find(name);
    if (it == file.groups.end())
      throw CheckpointError(refuse + file.name + " has no \"" + name + "\" group" + fix);
    return it->second;
  };
  const auto& saved = group("model");
  const auto& saved_opt = group("optimizer");
  for (const auto& [name, tensor] : current) {
    auto it = saved.find(name);
    if (it == saved.end())
      throw CheckpointError(refuse + "parameter " + name + " is missing" + fix);
    if (it->second.sizes() != tensor.sizes() || it->second.scalar_type() != tensor.scalar_type())
      throw CheckpointError(refuse + "parameter " + name + " is " + detail::dtype_name(it->second) +
                            " " + c10::str(it->second.sizes()) + " in the checkpoint but " +
                            detail::dtype_name(tensor) + " " + c10::str(tensor.sizes()) +
                            " in the model" + fix);
  }
  for (const auto& [name, tensor] : saved)
    if (!current.count(name))
      throw CheckpointError(refuse + "the checkpoint has parameter " + name +
                            " that the model does not" + fix);
  std::size_t with_state = 0;
  for (const auto& [key, p] : current) {
    const int present = int(saved_opt.count(key + ".exp_avg")) +
                        int(saved_opt.count(key + ".exp_avg_sq")) +
                        int(saved_opt.count(key + ".step"));
    if (present == 0) continue;
    if (present != 3)
      throw CheckpointError(refuse + "optimizer state of " + key + " is incomplete" + fix);
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"})
      if (saved_opt.at(key + suffix).sizes() != p.sizes())
        throw CheckpointError(refuse + "optimizer state " + key + suffix +
                              " does not match the parameter's shape" + fix);
    ++with_state;
  }
  if (with_state * 3 != saved_opt.size())
    throw CheckpointError(refuse + "the optimizer state names parameters the model does not have" +
                          fix);
  auto rng = file.groups.find("rng");
  if (rng != file.groups.end()) {
    auto it = rng->second.find(rng_key);
    if (it == rng->second.end() || it->second.scalar_type() != torch::kByte)
      throw CheckpointError(refuse + "the rng group holds no byte tensor \"" + rng_key +
                            "\" (written by another number of ranks?); resume with the number of "
                            "ranks the checkpoint was written with");
  }
}

/// Checks `file` against `current` (check_training_state) and only then copies it into the
/// tensors, the optimizer and (if present) the CPU generator. Throws CheckpointError otherwise.
inline void restore_training_state(const StateFile& file, const NamedTensors& current,
                                   torch::optim::AdamW& optimizer, const std::string& origin,
                                   const std::string& rng_key = "cpu") {
  check_training_state(file, current, origin, rng_key);
  const auto& saved = file.groups.at("model");
  const auto& saved_opt = file.groups.at("optimizer");
  auto rng = file.groups.find("rng");
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, tensor] : current) tensor.copy_(saved.at(name));
  }
  auto& state = optimizer.state();
  for (const auto& [name, param] : current) {
    const auto key = detail::state_key(param);
    if (!saved_opt.count(name + ".step")) {
      state.erase(key);
      continue;
    }
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(saved_opt.at(name + ".step").item<std::int64_t>());
    s->exp_avg(saved_opt.at(name + ".exp_avg").clone());
    s->exp_avg_sq(saved_opt.at(name + ".exp_avg_sq").clone());
    state[key] = std::move(s);
  }
  if (rng != file.groups.end()) set_cpu_rng_state(rng->second.at(rng_key));
}

/// restore_training_state() into `model`'s parameters by name.
inline void restore_training_state(const StateFile& file, torch::nn::Module& model,
                                   torch::optim::AdamW& optimizer, const std::string& origin,
                                   const std::string& rng_key = "cpu") {
  restore_training_state(file, model_tensors(model), optimizer, origin, rng_key);
}

/// The state file of a whole model (single process, or DDP rank 0). `rng_states` holds the
/// generator state of every rank ("cpu" for rank 0, `"cpu_rank_<r>"` for the others); empty means
/// this process's generator only.
inline StateFile training_state_file(const NamedTensors& params, torch::optim::AdamW& optimizer,
                                     NamedTensors rng_states = {}, std::string name = "state.pt") {
  StateFile file{std::move(name), {}};
  file.groups["model"] = params;
  file.groups["optimizer"] = adamw_tensors(params, optimizer);
  if (rng_states.empty()) rng_states["cpu"] = cpu_rng_state();
  file.groups["rng"] = std::move(rng_states);
  return file;
}

/// The key of rank `rank`'s generator state in the "rng" group.
inline std::string rank_rng_key(int rank) {
  return rank == 0 ? "cpu" : "cpu_rank_" + std::to_string(rank);
}

/// Refuses a checkpoint whose recorded settings differ from `current` in any key except
/// `free_keys` ("section.key"), naming the first difference. Resuming with another batch size,
/// seed or architecture would not continue the same run.
inline void check_same_settings(const nlohmann::json& recorded, const nlohmann::json& current,
                                const std::vector<std::string>& free_keys,
                                const std::string& origin) {
  for (const auto& [section, values] : current.items()) {
    for (const auto& [key, value] : values.items()) {
      const std::string name = section + "." + key;
      if (std::find(free_keys.begin(), free_keys.end(), name) != free_keys.end()) continue;
      const bool has = recorded.contains(section) && recorded[section].contains(key);
      if (!has || recorded[section][key] != value)
        throw CheckpointError("mpp: refusing checkpoint " + origin + ": it was written with " +
                              name + " = " +
                              (has ? recorded[section][key].dump() : std::string("(unset)")) +
                              " but the config says " + value.dump() +
                              "; resume with the config the run started with (its values are in "
                              "manifest.json) or start a fresh run");
    }
  }
}

/// The manifest's "progress" object.
inline nlohmann::json to_json(const Progress& p) {
  return {{"step", p.step}, {"epoch", p.epoch}, {"position", p.position}};
}

/// The Progress of a manifest (its "progress" object); throws nlohmann::json's errors when it
/// is missing.
inline Progress progress_from(const nlohmann::json& manifest) {
  const auto& p = manifest.at("progress");
  return {p.at("step").get<std::int64_t>(), p.at("epoch").get<std::int64_t>(),
          p.at("position").get<std::int64_t>()};
}

}  // namespace mpp::checkpoint
