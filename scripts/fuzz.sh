#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer + ASan + UBSan) into build-fuzz and runs each for
# a bounded time: the checkpoint readers from a seed corpus of the oracle files plus tiny
# hand-made files, the HTTP request parsers from a few valid bodies per route.
# Usage: scripts/fuzz.sh [seconds per target, default 30] [target names, default all]
# A crash leaves its input in build-fuzz/crashes/<target>/ and makes the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
shift || true
READERS="gguf safetensors llama2c"
REQUESTS="openai_request sglang_generate weight_update tokenize"
TARGETS=${*:-$READERS $REQUESTS}
BUILD=build-fuzz
ORACLE=../shared/oracle

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DREFIT_FUZZ=ON -DREFIT_TESTS=OFF -DREFIT_BENCH=OFF >&2
fi
ninja -C "$BUILD" -j"${JOBS:-2}" $(for t in $TARGETS; do echo "fuzz_$t"; done) >&2

# The parsers' unit tests under the same sanitizers first (no model needed).
if ninja -C "$BUILD" -j"${JOBS:-2}" request_limits_tests_sanitized >&2; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/request_limits_tests_sanitized" --gtest_brief=1 >&2
fi

SEEDS="$BUILD/seeds"
rm -rf "$SEEDS"
mkdir -p "$SEEDS"/{gguf,safetensors,llama2c,openai_request,sglang_generate,weight_update,tokenize}
cp "$ORACLE/stories260K/stories260K.gguf" "$SEEDS/gguf/"
cp "$ORACLE/stories260K/hf/model.safetensors" "$SEEDS/safetensors/"
# llama2c target: first byte picks the reader (0 model, 1 tokenizer to EOF, 2 tokenizer of 512).
{ printf '\x00'; cat "$ORACLE/stories260K/stories260K.bin"; } > "$SEEDS/llama2c/model"
{ printf '\x01'; cat "$ORACLE/stories260K/tok512.bin"; } > "$SEEDS/llama2c/tok_eof"
{ printf '\x02'; cat "$ORACLE/stories260K/tok512.bin"; } > "$SEEDS/llama2c/tok_512"
# Tiny valid files: mutations of small inputs reach deep code paths far faster.
/usr/bin/python3 - "$SEEDS" <<'PY'
import struct, sys, json
out = sys.argv[1]
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [s('general.architecture') + struct.pack('<I', 8) + s('llama'),
      s('a.u32') + struct.pack('<II', 4, 7),
      s('a.f32') + struct.pack('<If', 6, 0.5),
      s('a.bool') + struct.pack('<IB', 7, 1),
      s('a.i64') + struct.pack('<Iq', 11, -3),
      s('a.toks') + struct.pack('<IIQ', 9, 8, 2) + s('x') + s('ü'),
      s('a.nest') + struct.pack('<IIQ', 9, 9, 1) + struct.pack('<IQi', 5, 1, 4)]
ti = [s('w') + struct.pack('<IQQIQ', 2, 32, 2, 0, 0),
      s('q') + struct.pack('<IQIQ', 1, 32, 8, 256),
      s('m') + struct.pack('<IQIQ', 1, 32, 39, 320)]
head = b'GGUF' + struct.pack('<IQQ', 3, len(ti), len(kv)) + b''.join(kv) + b''.join(ti)
head += b'\0' * (-len(head) % 32)
data = struct.pack('<64f', *range(64)) + b'\0' * 0 + bytes(34) + b'\0' * 30 + bytes(17)
open(f'{out}/gguf/tiny.gguf', 'wb').write(head + data)
hdr = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]},
                  "__metadata__": {"format": "pt"}}).encode()
open(f'{out}/safetensors/tiny.safetensors', 'wb').write(struct.pack('<Q', len(hdr)) + hdr + bytes(12))
D, H, L, NH, KV, V, S = 4, 8, 1, 2, 2, 3, 2
n = V*D + L*D + L*D*D*2 + L*(D//NH*KV)*D*2 + L*D + 3*L*H*D + D + 2*S*(D//NH//2)
open(f'{out}/llama2c/tiny_model', 'wb').write(b'\0' + struct.pack('<7i', D, H, L, NH, KV, V, S) + bytes(4*n))
tok = struct.pack('<I', 3) + b''.join(struct.pack('<fi', -i, len(p)) + p for i, p in enumerate([b'a', b'bc', b'def']))
open(f'{out}/llama2c/tiny_tok', 'wb').write(b'\x01' + tok)
PY
# Request bodies: a few valid ones per route (the first byte picks the variant where the
# target has several: chat for openai_request, the route for weight_update).
/usr/bin/python3 - "$SEEDS" <<'PY'
import base64, json, struct, sys
out = sys.argv[1]
def put(target, name, body, lead=None):
    data = json.dumps(body).encode()
    open(f'{out}/{target}/{name}', 'wb').write((bytes([lead]) if lead is not None else b'') + data)
put('openai_request', 'completion', {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7,
    "top_p": 0.9, "top_k": 40, "stop": ["\n"], "logprobs": 2, "seed": 3, "n": 2}, 0)
put('openai_request', 'ids', {"prompt": [[1, 5, 9], [1, 7]], "max_tokens": None, "echo": True,
    "prompt_logprobs": 1, "min_tokens": 1, "stop_token_ids": [2], "stream": True,
    "stream_options": {"include_usage": True}}, 0)
put('openai_request', 'chat', {"messages": [{"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
     "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "c", "content": "2"}], "max_completion_tokens": 8,
    "logprobs": True, "top_logprobs": 3, "tools": [{"type": "function", "function": {"name": "f"}}],
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1}, 1)
put('sglang_generate', 'text', {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 8,
    "temperature": 0.5, "top_k": 5, "min_p": 0.1, "stop": "x", "n": 2, "sampling_seed": 4},
    "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2, "rid": "r"})
put('sglang_generate', 'batch', {"input_ids": [[1, 5, 9], [1, 7]], "sampling_params": [
    {"max_new_tokens": 0}, {"max_new_tokens": 3, "ignore_eos": True, "stop_token_ids": [2]}],
    "return_logprob": [True, False], "rid": ["a", "b"], "stream": False})
put('weight_update', 'disk', {"model_path": "/tmp/ckpt", "load_format": "safetensors",
    "abort_all_requests": False, "weight_version": "v2", "is_async": True, "token_step": 3}, 0)
put('weight_update', 'version', {"new_version": "v3", "abort_all_requests": False}, 1)
put('weight_update', 'named', {"named_tensors": [{"name": "w", "dtype": "float32", "shape": [2, 2],
    "data": base64.b64encode(struct.pack('<4f', 1, 2, 3, 4)).decode()}], "weight_version": "v4"}, 2)
put('weight_update', 'direct', {"serialized_named_tensors": [base64.b64encode(json.dumps([{"name": "w",
    "dtype": "bfloat16", "shape": [2], "data": base64.b64encode(b"\0\0\0\0").decode()}]).encode()).decode()],
    "load_format": "direct"}, 2)
put('weight_update', 'bucket', {"serialized_named_tensors": [{"flattened_tensor":
    base64.b64encode(bytes(12)).decode(), "metadata": [{"name": "a", "shape": [2], "dtype": "float32",
    "start_idx": 0, "end_idx": 8, "numel": 8}, {"name": "b", "shape": [2], "dtype": "bfloat16",
    "start_idx": 8, "end_idx": 12, "numel": 4}]}, {"metadata": []}], "load_format": "flattened_bucket"}, 2)
put('tokenize', 'prompt', {"prompt": "Once upon a time \u2615 <s>", "add_special_tokens": True})
put('tokenize', 'chat', {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True})
put('tokenize', 'detokenize', {"tokens": [1, 300, 301, 4, 200]})
PY

status=0
for target in $TARGETS; do
  corpus="$BUILD/corpus/$target"; crashes="$BUILD/crashes/$target"
  mkdir -p "$corpus" "$crashes"
  echo "fuzz_$target: ${SECONDS_PER_TARGET}s" >&2
  # -malloc_limit_mb catches any allocation driven by an unchecked count.
  if ! "$BUILD/fuzz_$target" "$corpus" "$SEEDS/$target" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len=65536 -malloc_limit_mb=256 -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$crashes/" -print_final_stats=1 2> "$BUILD/fuzz_$target.log"; then
    echo "fuzz_$target FAILED: see $BUILD/fuzz_$target.log and $crashes/" >&2
    tail -40 "$BUILD/fuzz_$target.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$BUILD/fuzz_$target.log" | tail -2 >&2
  fi
done
exit $status
