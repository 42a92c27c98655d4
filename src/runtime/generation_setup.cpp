#include "runtime/generation_setup.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "formats/hf_folder.h"

namespace refit {

GenerationSetup read_generation_setup(const Checkpoint* ck, const Tokenizer* tok,
                                      const ModelConfig& config, const std::string& mode) {
  if (mode.empty()) fail("--generation-config: give auto, vllm or a folder");
  // The generation_config.json in force: FOLDER's, else the model folder's (also under
  // "vllm", whose eos ids still stop generation as they do in vLLM).
  nlohmann::json gen;
  std::string gen_source;
  const HfFolder* hf = ck ? ck->hf() : nullptr;
  if (mode != "auto" && mode != "vllm") {
    const std::filesystem::path file = std::filesystem::path(mode) / "generation_config.json";
    if (!std::filesystem::is_regular_file(file))
      fail("--generation-config {}: there is no generation_config.json in that folder", mode);
    gen_source = file.string();
    gen = read_json_file(gen_source);
    if (!gen.is_object()) throw FormatError(fmt::format("{}: must be a JSON object", gen_source));
  } else if (hf && !hf->generation_config().is_null()) {
    gen_source = hf->path() + "/generation_config.json";
    gen = hf->generation_config();
  }

  GenerationSetup out;
  StopTokenIds& stop = out.stop_ids;
  if (tok && tok->vocab().eos() >= 0) {
    stop.add("tokenizer eos", {tok->vocab().eos()});
    stop.primary = tok->vocab().eos();
  }
  if (hf && hf->config().contains("eos_token_id")) {
    const std::vector<int32_t> ids =
        json_token_ids(hf->config()["eos_token_id"], hf->path() + "/config.json", "eos_token_id");
    stop.add("config.json eos_token_id", ids);
    if (stop.primary < 0 && !ids.empty()) stop.primary = ids[0];
  }
  if (gen.is_object() && gen.contains("eos_token_id"))
    stop.add(std::filesystem::path(gen_source).filename().string() + " eos_token_id",
             json_token_ids(gen["eos_token_id"], gen_source, "eos_token_id"));
  if (ck && ck->gguf())
    stop.add("GGUF end-of-generation tokens (llama.cpp's)",
             gguf_end_of_generation_ids(ck->gguf()->metadata()));
  // llama.c and a GGUF without a vocabulary name no eos: their family's (config) one.
  if (stop.ids.empty() && ck && !hf && config.eos_id >= 0)
    stop.add("default eos of the format", {config.eos_id});
  if (stop.primary < 0 && !stop.ids.empty()) stop.primary = stop.ids.front();

  out.defaults = read_generation_defaults(gen, gen_source, mode);
  return out;
}

}  // namespace refit
