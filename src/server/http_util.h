// Small pieces every route file of the server shares: JSON replies, ids, clocks.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

namespace refit {

// Serialises with invalid UTF-8 replaced (a token's bytes may be half a character).
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
std::string random_id(const char* prefix);
long unix_now();
double monotonic_seconds();

// A JSON object body (an empty body is {}); HttpError 400 otherwise.
nlohmann::json object_body(const httplib::Request& req);

}  // namespace refit
