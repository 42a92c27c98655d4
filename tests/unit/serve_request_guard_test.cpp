// Who may drive the server (server/request_guard.h): the Host, Origin, key and content-type
// checks as pure functions of a request head, the --weights-root resolution
// (server/weights_root.h), and the checkpoint opener's refusal of FIFOs and of files that are
// no checkpoint, without their bytes in the message. No sockets.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "formats/checkpoint.h"
#include "formats_test_util.h"
#include "server/request_guard.h"
#include "server/weights_root.h"

namespace refit {
namespace {

using testing::TempDir;

RequestHead head(std::string method, std::string path) {
  RequestHead h;
  h.method = std::move(method);
  h.path = std::move(path);
  h.host = "127.0.0.1:8000";
  return h;
}

RequestHead with_key(RequestHead h, const std::string& key) {
  h.authorization = "Bearer " + key;
  return h;
}

AccessOptions keys(std::string user, std::string admin) {
  AccessOptions o;
  o.api_key = std::move(user);
  o.admin_api_key = std::move(admin);
  return o;
}

int status(const std::optional<HttpError>& e) { return e ? e->status : 200; }

TEST(ServeRequestGuard, loopback_names_are_recognised_with_any_port) {
  for (const char* h :
       {"localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"", "0.0.0.0", "10.0.0.1", "localhost.evil.com", "evil.com", "128.0.0.1",
                        "::", "127.0.0.1.evil.com"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
  EXPECT_EQ(host_of("[::1]:8000"), "::1");
  EXPECT_EQ(host_of("Example.COM:80"), "example.com");
  EXPECT_EQ(host_of("localhost."), "localhost");
  EXPECT_EQ(host_of("127.0.0.1"), "127.0.0.1");
}

TEST(ServeRequestGuard, constant_time_compare_is_an_exact_compare) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secreT", "secret"));
  EXPECT_FALSE(constant_time_equal("secret-and-more", "secret"));
  EXPECT_FALSE(constant_time_equal("sec", "secret"));
  EXPECT_FALSE(constant_time_equal("", "secret"));
  EXPECT_FALSE(constant_time_equal("x", ""));
}

TEST(ServeRequestGuard, a_loopback_server_refuses_a_rebound_host_name) {
  RequestGuard g({}, "127.0.0.1");
  RequestHead h = head("GET", "/v1/models");
  for (const char* host : {"127.0.0.1:8000", "localhost:8000", "localhost", "[::1]:8000"}) {
    h.host = host;
    EXPECT_EQ(status(g.check(h)), 200) << host;
  }
  h.host = "attacker.example:8000";  // DNS rebinding: the page's own name, now 127.0.0.1
  const auto e = g.check(h);
  ASSERT_EQ(status(e), 403);
  EXPECT_EQ(e->code, "host_not_allowed");
  EXPECT_NE(e->message.find("--allowed-hosts"), std::string::npos) << e->message;
  h.host.reset();  // HTTP/1.0 without Host: no browser sends that
  EXPECT_EQ(status(g.check(h)), 200);

  AccessOptions o;
  o.allowed_hosts = {"refit.internal"};
  RequestGuard listed(o, "127.0.0.1");
  h.host = "refit.internal:8000";
  EXPECT_EQ(status(listed.check(h)), 200);
  h.host = "other.internal";
  EXPECT_EQ(status(listed.check(h)), 403);
  o.allowed_hosts = {"*"};
  EXPECT_EQ(status(RequestGuard(o, "127.0.0.1").check(h)), 200);
  // On every address, the Host check is the operator's (--allowed-hosts) to ask for.
  EXPECT_EQ(status(RequestGuard({}, "0.0.0.0").check(h)), 200);
}

TEST(ServeRequestGuard, a_foreign_origin_may_not_change_anything) {
  RequestGuard g({}, "127.0.0.1");
  RequestHead post = head("POST", "/update_weights_from_disk");
  post.origin = "https://attacker.example";
  const auto e = g.check(post);
  ASSERT_EQ(status(e), 403);
  EXPECT_EQ(e->code, "origin_not_allowed");
  post.origin = "null";  // a sandboxed frame or a file:// page
  EXPECT_EQ(status(g.check(post)), 403);
  for (const char* origin : {"http://localhost:3000", "http://127.0.0.1:8000", "http://[::1]"}) {
    post.origin = origin;
    EXPECT_EQ(status(g.check(post)), 200) << origin;
  }
  // Reading is not refused by the Origin (the server sends no CORS headers, so a page cannot
  // read the answer); GET /flush_cache changes the cache, so it is.
  RequestHead get = head("GET", "/v1/models");
  get.origin = "https://attacker.example";
  EXPECT_EQ(status(g.check(get)), 200);
  get.path = "/flush_cache";
  EXPECT_EQ(status(g.check(get)), 403);

  AccessOptions o;
  o.allowed_origins = {"https://ui.example/"};
  RequestGuard listed(o, "127.0.0.1");
  post.origin = "https://UI.example";
  EXPECT_EQ(status(listed.check(post)), 200);
  post.origin = "https://ui.example:8443";
  EXPECT_EQ(status(listed.check(post)), 403);
  // The address the server listens on is its own origin.
  post.origin = "http://10.1.2.3:9000";
  post.host = "10.1.2.3:8000";
  EXPECT_EQ(status(RequestGuard({}, "10.1.2.3").check(post)), 200);
}

TEST(ServeRequestGuard, without_keys_every_route_is_open) {
  RequestGuard g({}, "127.0.0.1");
  EXPECT_EQ(status(g.check(head("POST", "/update_weights_from_disk"))), 200);
  EXPECT_EQ(status(g.check(head("POST", "/v1/completions"))), 200);
}

TEST(ServeRequestGuard, the_api_key_guards_every_route_but_the_probes) {
  RequestGuard g(keys("user-key", ""), "127.0.0.1");
  for (const char* path : {"/health", "/health_generate", "/metrics"})
    EXPECT_EQ(status(g.check(head("GET", path))), 200) << path;
  for (const char* path : {"/v1/models", "/get_server_info", "/no/such/route"}) {
    const auto e = g.check(head("GET", path));
    ASSERT_EQ(status(e), 401) << path;
    EXPECT_EQ(e->code, "missing_api_key");
    EXPECT_EQ(e->type, "authentication_error");
    EXPECT_NE(e->message.find("Authorization: Bearer"), std::string::npos) << e->message;
  }
  EXPECT_EQ(status(g.check(with_key(head("POST", "/v1/completions"), "user-key"))), 200);
  // Only --api-key: it guards the admin routes too (as SGLang's does).
  EXPECT_EQ(status(g.check(with_key(head("POST", "/update_weights_from_disk"), "user-key"))), 200);
  const auto wrong = g.check(with_key(head("POST", "/v1/completions"), "user-kez"));
  ASSERT_EQ(status(wrong), 401);
  EXPECT_EQ(wrong->code, "invalid_api_key");
  EXPECT_EQ(wrong->message.find("user-kez"), std::string::npos) << "echoes the key given";
  EXPECT_EQ(wrong->message.find("user-key"), std::string::npos) << "names the server's key";
  RequestHead basic = head("GET", "/v1/models");
  basic.authorization = "Basic dXNlcjprZXk=";
  EXPECT_EQ(status(g.check(basic)), 401);
  basic.authorization = "bearer   user-key  ";  // scheme in any case, spaces around
  EXPECT_EQ(status(g.check(basic)), 200);
  basic.authorization = "Bearer";
  EXPECT_EQ(status(g.check(basic)), 401);
  EXPECT_EQ(status(g.check(head("OPTIONS", "/v1/completions"))), 200);  // a preflight
}

TEST(ServeRequestGuard, the_admin_key_alone_opens_the_admin_routes) {
  RequestGuard g(keys("user-key", "admin-key"), "127.0.0.1");
  const std::vector<std::pair<const char*, const char*>> admin_routes = {
      {"POST", "/update_weights_from_disk"},
      {"POST", "/update_weights_from_tensor"},
      {"POST", "/init_weights_update_group"},
      {"POST", "/update_weights_from_distributed"},
      {"POST", "/destroy_weights_update_group"},
      {"POST", "/update_weight_version"},
      {"POST", "/get_weights_by_name"},
      {"POST", "/update_weights"},
      {"POST", "/reload_weights"},
      {"POST", "/pause_generation"},
      {"POST", "/continue_generation"},
      {"POST", "/pause"},
      {"POST", "/resume"},
      {"POST", "/release_memory_occupation"},
      {"POST", "/resume_memory_occupation"},
      {"POST", "/sleep"},
      {"POST", "/wake_up"},
      {"GET", "/flush_cache"},
      {"POST", "/flush_cache"},
      {"POST", "/reset_prefix_cache"}};
  for (const auto& [method, path] : admin_routes) {
    EXPECT_EQ(route_access(method, path), RouteAccess::admin) << path;
    const auto e = g.check(with_key(head(method, path), "user-key"));
    ASSERT_EQ(status(e), 403) << path;
    EXPECT_EQ(e->code, "admin_key_required");
    EXPECT_NE(e->message.find("--admin-api-key"), std::string::npos) << e->message;
    EXPECT_EQ(status(g.check(with_key(head(method, path), "admin-key"))), 200) << path;
    EXPECT_EQ(status(g.check(head(method, path))), 401) << path;
    EXPECT_EQ(status(g.check(with_key(head(method, path), "nobody"))), 401) << path;
  }
  // The admin key opens the ordinary routes as well; the user key keeps them.
  for (const char* key : {"user-key", "admin-key"})
    EXPECT_EQ(status(g.check(with_key(head("POST", "/generate"), key))), 200) << key;
  for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions", "/tokenize",
                           "/abort_request", "/get_weight_version", "/get_server_info"})
    EXPECT_EQ(route_access("POST", path), RouteAccess::ordinary) << path;

  // Only --admin-api-key: ordinary routes open, admin routes need it.
  RequestGuard admin_only(keys("", "admin-key"), "127.0.0.1");
  EXPECT_EQ(status(admin_only.check(head("POST", "/v1/completions"))), 200);
  EXPECT_EQ(status(admin_only.check(head("POST", "/update_weights_from_disk"))), 401);
  EXPECT_EQ(status(admin_only.check(with_key(head("POST", "/pause_generation"), "admin-key"))),
            200);
}

TEST(ServeRequestGuard, a_body_must_come_as_json) {
  RequestGuard g({}, "127.0.0.1");
  RequestHead h = head("POST", "/update_weights_from_disk");
  h.has_body = true;
  // The content types a page may send without a CORS preflight, and others.
  for (const char* type :
       {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x", "application/octet-stream", "application/jsonx"}) {
    h.content_type = type;
    const auto e = g.check(h);
    ASSERT_EQ(status(e), 415) << type;
    EXPECT_EQ(e->code, "unsupported_media_type");
    EXPECT_NE(e->message.find("application/json"), std::string::npos) << e->message;
  }
  for (const char* type :
       {"application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"}) {
    h.content_type = type;
    EXPECT_EQ(status(g.check(h)), 200) << type;
  }
  h.content_type.reset();  // requests.post(url, data=json.dumps(...)) sends none
  EXPECT_EQ(status(g.check(h)), 200);
  h.content_type = "text/plain";
  h.has_body = false;  // nothing to read: POST /continue_generation with no body
  EXPECT_EQ(status(g.check(h)), 200);
}

TEST(ServeRequestGuard, checks_run_host_then_origin_then_key_then_type) {
  RequestGuard g(keys("k", ""), "127.0.0.1");
  RequestHead h = head("POST", "/v1/completions");
  h.has_body = true;
  h.content_type = "text/plain";
  EXPECT_EQ(status(g.check(h)), 401);  // who asks comes before what they send
  h.origin = "https://attacker.example";
  EXPECT_EQ(g.check(h)->code, "origin_not_allowed");
  h.host = "attacker.example";
  EXPECT_EQ(g.check(h)->code, "host_not_allowed");
}

TEST(ServeRequestGuard, only_a_reachable_server_without_keys_warns) {
  EXPECT_NE(RequestGuard({}, "0.0.0.0").startup_warning().find("--api-key"), std::string::npos);
  EXPECT_EQ(RequestGuard({}, "127.0.0.1").startup_warning(), "");
  EXPECT_EQ(RequestGuard(keys("k", ""), "0.0.0.0").startup_warning(), "");
}

TEST(ServeWeightsRoot, paths_resolve_inside_the_root_or_are_refused_alike) {
  TempDir dir;
  namespace fs = std::filesystem;
  fs::create_directories(dir.path / "root" / "step-1");
  dir.write("root/step-1/model.safetensors", "x");
  dir.write("secret", "x");
  fs::create_symlink(dir.path / "secret", dir.path / "root" / "link-out");
  fs::create_symlink(dir.path / "root" / "step-1", dir.path / "root" / "latest");
  const WeightsRoot root(dir.file("root"));
  const fs::path canonical_root = fs::canonical(dir.path / "root");
  EXPECT_EQ(root.resolve("step-1", "model_path"), (canonical_root / "step-1").string());
  EXPECT_EQ(root.resolve(dir.file("root/latest"), "model_path"),
            (canonical_root / "step-1").string());
  EXPECT_EQ(root.resolve(dir.file("root/missing"), "model_path"),
            (canonical_root / "missing").string());
  auto refusal = [&](const std::string& path) {
    try {
      root.resolve(path, "model_path");
    } catch (const HttpError& e) {
      return e;
    }
    ADD_FAILURE() << path << " was let through";
    return HttpError{};
  };
  const HttpError existing = refusal(dir.file("secret"));
  EXPECT_EQ(existing.status, 403);
  EXPECT_EQ(existing.param, "model_path");
  // The same answer for a file that exists, one that does not, and ways around the root.
  for (const std::string& path :
       {dir.file("no-such-file"), dir.file("root/link-out"), dir.file("root/../secret"),
        dir.file("root/missing/../../secret"), std::string("../secret"), std::string("/etc/passwd"),
        dir.file("root-sibling")})
    EXPECT_EQ(refusal(path).message, existing.message) << path;
  EXPECT_EQ(existing.message.find("secret"), std::string::npos) << existing.message;
  const char with_nul[] = "/step-1\0/../../secret";
  EXPECT_EQ(refusal(dir.file("root") + std::string(with_nul, sizeof with_nul - 1)).status, 400);
  EXPECT_THROW(WeightsRoot(dir.file("no-such-root")), Error);
  EXPECT_EQ(WeightsRoot().resolve("/anything", "model_path"), "/anything");
}

TEST(ServeCheckpointPaths, a_fifo_is_refused_without_being_opened) {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening it for reading would wait for a writer forever: this returns at once.
  testing::expect_format_error([&] { Checkpoint::open(fifo); }, {"pipe", "FIFO"});
  // And a FIFO inside a folder (its config.json) is refused by the file reader itself.
  std::filesystem::create_directories(dir.path / "folder");
  ASSERT_EQ(::mkfifo(dir.file("folder/config.json").c_str(), 0600), 0);
  testing::expect_format_error([&] { Checkpoint::open(dir.file("folder")); },
                               {"config.json", "not a regular file"});
}

TEST(ServeCheckpointPaths, a_file_that_is_no_checkpoint_is_named_without_its_bytes) {
  TempDir dir;
  // /etc/shadow-like text: read as a legacy llama2.c header, its first bytes are numbers.
  const std::string text = "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n";
  const std::string path = dir.write("shadow", text);
  try {
    Checkpoint::open(path);
    ADD_FAILURE() << "a text file opened as a checkpoint";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not a checkpoint refit reads"), std::string::npos) << msg;
    EXPECT_NE(msg.find("safetensors / GGUF / HF folder / llama2.c"), std::string::npos) << msg;
    // Not one of the header words the bytes would make ("dim = 1953460082").
    int32_t first = 0;
    std::memcpy(&first, text.data(), 4);
    EXPECT_EQ(msg.find(std::to_string(first)), std::string::npos) << msg;
    EXPECT_EQ(msg.find("dim"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("root:"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace refit
