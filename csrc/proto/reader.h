// Reads an ONNX ModelProto from its wire format into the IR, without libprotobuf
// and without copying tensor bytes: raw_data and packed float/double data stay
// views into the (memory-mapped) input.
#pragma once

#include <memory>
#include <string>

#include "ir/model.h"

namespace pyonnxopt::proto {

struct LoadOptions {
  // Folder that external-data locations are relative to; defaults to the
  // model file's folder (required for external data when loading bytes).
  std::string base_dir;
  // Allow external-data locations outside base_dir (absolute, `..`, symlinks out).
  bool allow_external_outside = false;
  // Tensors stored as references to kWeightlessLocation (serialize_weightless)
  // take their bytes from this model's tensor of the same index, shared, not
  // copied: a graph rewritten outside (onnx's version converter) gets its
  // weights back.
  const ir::Model* weights_from = nullptr;
};

// Throws ir::ModelError naming the file, and where known the tensor or node
// and the byte offset.
std::unique_ptr<ir::Model> load_file(const std::string& path, const LoadOptions& options);
std::unique_ptr<ir::Model> load_bytes(std::string bytes, const LoadOptions& options);

}  // namespace pyonnxopt::proto
