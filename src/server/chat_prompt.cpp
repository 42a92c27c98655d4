// render_chat_prompt (server/chat_request.h), apart from the request parsing so the parsers
// link without the embedded Jinja runtime (the request-parser fuzz targets do).
#include <fmt/format.h>

#include "server/api_types.h"
#include "server/chat_request.h"

namespace refit {

std::string render_chat_prompt(const ChatTemplate& chat_template, const ChatInput& input) {
  try {
    return chat_template.render(input);
  } catch (const TemplateRenderError& e) {
    throw HttpError{400,
                    fmt::format("the chat template refused the request: {}", e.what()),
                    "invalid_request_error",
                    "messages",
                    {}};
  }
}

}  // namespace refit
