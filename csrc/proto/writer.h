// IR -> wire format. Tensors go inline or to external-data files; unchanged
// file-backed bytes are copied file-to-file (copy_file_range), never through
// memory. Every file is written under a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::proto {

enum class ExternalMode {
  kKeep,  // tensors stay where they were; switch to kAll if the model would pass 2 GB
  kAll,   // every raw tensor of at least size_threshold bytes goes to external data
  kNone,  // everything inline (an error past 2 GB)
};

struct SaveOptions {
  ExternalMode mode = ExternalMode::kKeep;
  std::string location;             // data file name beside the model; "" = "<model file>.data"
  uint64_t size_threshold = 1024;   // smaller tensors stay inline under kAll
  uint64_t align = 4096;            // offset alignment for tensors of at least align_threshold bytes
  uint64_t align_threshold = 1 << 20;
  uint64_t max_file_size = 0;       // > 0: start a new data file past this many bytes
};

struct SaveResult {
  uint64_t model_bytes = 0;
  std::vector<std::string> data_files;  // names relative to the model's folder
  uint64_t external_bytes = 0;
  bool switched_to_external = false;  // kKeep turned into kAll for the 2 GB limit
};

constexpr uint64_t kProtobufLimit = 0x7fffffff;  // 2 GiB - 1: protobuf's message limit

// Throws ir::ModelError for a model past 2 GB saved inline, or an I/O failure.
SaveResult save_file(const ir::Model& model, const std::string& path, const SaveOptions& options);
// The whole model inline, external data read in. Throws past 2 GB.
std::string serialize(const ir::Model& model);
// The model with every raw tensor over `threshold` bytes left as an
// external-data reference to kWeightlessLocation, a file that does not
// exist: dims and types stay, the weights do not. For shape inference and
// onnx's version converter, cheap and never past 2 GB. A reference's offset
// is the tensor's index in all_tensors() (see LoadOptions::weights_from).
constexpr const char* kWeightlessLocation = "__pyonnxopt_weightless__";
std::string serialize_weightless(const ir::Model& model, uint64_t threshold);
// One TensorProto, inline.
std::string serialize_tensor(const ir::Tensor& tensor);
// One AttributeProto, inline (tensor data included): a canonical key for
// comparing attributes.
std::string serialize_attribute(const ir::Attribute& attribute);

}  // namespace pyonnxopt::proto
