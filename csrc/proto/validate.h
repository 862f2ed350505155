// Checks for messages the IR keeps as bytes (TypeProto, Segment, quantization
// annotations, device configurations): each against its schema in onnx.proto,
// so bytes protobuf would refuse are refused at load, not written back.
#pragma once

#include <string_view>

namespace pyonnxopt::proto {

// `depth` is the message depth of the bytes themselves (ModelProto = 1).
// Each throws proto::ParseError with an offset relative to the bytes.
void validate_type(std::string_view bytes, int depth);
void validate_segment(std::string_view bytes, int depth);
void validate_tensor_annotation(std::string_view bytes, int depth);
void validate_node_device_configuration(std::string_view bytes, int depth);
void validate_device_configuration(std::string_view bytes, int depth);

}  // namespace pyonnxopt::proto
