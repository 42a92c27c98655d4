// The largest request body each route takes, refused by its declared Content-Length before
// a byte of it is read (413, OpenAI-style body). Three sizes: generation routes hold a prompt
// the context can take (or a batch of them), the tensor route a full weight update, every
// other route a small JSON object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace refit {

struct BodyLimits {
  size_t generation = size_t{64} << 20;  // completions, chat, /generate, /tokenize, ...
  size_t tensor = size_t{64} << 20;      // /update_weights_from_tensor
  size_t metadata = size_t{16} << 20;    // weight-sync metadata: every tensor's name and shape
  size_t other = size_t{1} << 20;

  size_t for_path(const std::string& path) const;
  size_t largest() const;
};

// What the sizes derive from.
struct BodyLimitInputs {
  int64_t context = 0;              // tokens
  size_t text_bytes_per_token = 0;  // tokenizer/token_byte_bound.h; 0: unbounded
  int64_t parameter_elements = 0;   // the model's checkpoint elements (a full update)
  size_t override_bytes = 0;        // --max-request-bytes: every route's limit when set
};

// generation: eight contexts of the longest text (a batch of prompts, JSON escaping), at
// least 64 MiB; tensor: every parameter as f32 in base64 (16/3 bytes an element) plus
// 64 MiB; an override replaces them all.
BodyLimits body_limits(const BodyLimitInputs& in);

class Engine;
// The limits for this engine's model: its parameters and, through its tokenizer, the
// longest text a token stands for.
BodyLimits body_limits_for(const Engine& engine, int64_t context, size_t override_bytes);

// The pre-routing check: true (and a 413 in `res`) when the declared length is over the
// route's limit. A chunked body is counted as it is read (ConnectionStream::begin_body).
bool refuse_oversized_body(const BodyLimits& limits, const httplib::Request& req,
                           httplib::Response& res);

}  // namespace refit
