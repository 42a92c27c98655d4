#!/usr/bin/python3
"""SGLang's weight-update protocol, replayed as its RL clients send it, against a real
`refit serve` (CTest runs this file; argv[1] is the refit binary).

Each request is built the way the named upstream function builds it, with refit's CPU
carrier (src/server/weight_carrier.h) where SGLang's pickles carry CUDA IPC handles:

  slime  slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py
         _send_to_colocated_engine + _build_flattened_tensor_data (one FlattenedTensorBucket
         per engine rank, empty buckets as padding, load_format "flattened_bucket",
         weight_version str(...)), posted as slime/backends/sglang_utils/sglang_engine.py
         SGLangEngine.update_weights_from_tensor does ({serialized_named_tensors,
         load_format, flush_cache: False, weight_version}); the per-dtype buckets of a
         FlattenedTensorBucket without supports_multi_dtypes too. Disk: pause_generation,
         flush_cache, then {model_path, torch_empty_cache: True, load_format: "auto",
         weight_version} as slime's fork miles/backends/sglang_utils/sglang_engine.py
         SGLangEngine.update_weights_from_disk posts it, continue_generation.
  AReaL  areal/engine/sglang_remote.py RemoteSGLangEngine.update_weights (meta.type "disk"):
         POST /pause_generation, update_weights_from_disk({model_path, abort_all_request:
         True} — AReaL's misspelling, an unknown field SGLang ignores), POST
         /continue_generation.
  verl   verl/workers/rollout/sglang_rollout/http_server_engine.py
         HttpServerAdapter.update_weights_from_tensor: base64 of each serialized entry,
         {serialized_named_tensors, load_format, flush_cache}.

Every update is checked against a fresh server started on the same weights: greedy tokens
and their logprobs equal bit for bit. A partial checkpoint folder changes only its tensors.
Every bad input is a 4xx naming the problem, after which the server still serves its old
weights (outputs unchanged) under its old version label. Unknown fields are accepted.
"""
import base64
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import urllib.error
import urllib.request

import torch

from refit_server import RefitServer  # tests/cli/refit_server.py

REFIT = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORACLE = os.path.join(ROOT, "..", "shared", "oracle")
MODEL_A = os.path.join(ORACLE, "stories260K", "hf")
OTHER_MODEL = os.path.join(ORACLE, "llamacpp", "llama-f32", "micro-llama-f32-s1.gguf")
PROMPTS = [[1, 403, 407, 261, 378], [1, 20, 30, 40, 50, 60], [1, 7]]
N = 16

# The trainer-side helper, loaded from its file so this test needs no compiled module.
_spec = importlib.util.spec_from_file_location("weight_bucket", os.path.join(ROOT, "python", "refit", "weight_bucket.py"))
wb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wb)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---- checkpoints -------------------------------------------------------------------------

_CODES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
_DTYPES = {v: k for k, v in _CODES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def write_folder(path, tensors):
    """An HF folder: the served model's config.json and `tensors` as model.safetensors."""
    os.makedirs(path, exist_ok=True)
    shutil.copy(os.path.join(MODEL_A, "config.json"), os.path.join(path, "config.json"))
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        raw = wb.tensor_bytes(tensors[name])
        header[name] = {"dtype": _CODES[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


# ---- servers -----------------------------------------------------------------------------

class Server(RefitServer):
    def __init__(self, model, tp=1):
        super().__init__(REFIT, model, tp=tp)

    # Non-JSON error bodies come back as {"message": text}, which the checks below read.
    def request(self, method, path, body=None, timeout=120):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, (json.loads(raw) if raw else {})
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"message": raw.decode(errors="replace")}

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def label(self):
        status, j = self.request("GET", "/get_weight_version")
        return j.get("weight_version") if status == 200 else None

    def greedy(self, prompt):
        status, j = self.post("/v1/completions", {"prompt": prompt, "max_tokens": N, "temperature": 0, "logprobs": 1})
        if status != 200:
            return ("error", status, j)
        c = j["choices"][0]
        return (c["token_ids"], c["logprobs"]["token_logprobs"])

    def greedy_all(self):
        return [self.greedy(p) for p in PROMPTS]

    def weight(self, name):
        status, j = self.post("/get_weights_by_name", {"name": name, "truncate_size": 1 << 30})
        return j.get("values") if status == 200 else None

    def stop(self):
        return super().stop(timeout=60)


def expect_ok(server, path, body, what):
    status, j = server.post(path, body)
    check(status == 200 and j.get("success") is True, f"{what}: {status} {j}")
    return j


# ---- the weights -------------------------------------------------------------------------

work = tempfile.mkdtemp(prefix="refit-sglang-update-")
A = read_safetensors(os.path.join(MODEL_A, "model.safetensors"))
# B: every tensor moved, rounded to bf16-representable values so that sending some of
# them as bf16 is exact (the folder stores them as f32).
B = {n: (t * 1.25 + 0.01).to(torch.bfloat16).to(torch.float32) for n, t in A.items()}
MODEL_B = write_folder(os.path.join(work, "B"), B)
PARTIAL_NAMES = ["model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "model.layers.3.mlp.up_proj.weight"]
PARTIAL = write_folder(os.path.join(work, "partial"), {n: B[n] for n in PARTIAL_NAMES})
MODEL_AP = write_folder(os.path.join(work, "A-with-partial"), {**A, **{n: B[n] for n in PARTIAL_NAMES}})
NOTHING = write_folder(os.path.join(work, "nothing-of-ours"), {"model.layers.0.unrelated.weight": torch.zeros(4)})
# A diverged trainer's checkpoint (one NaN), and the partial folder plus a tensor no
# parameter takes.
NAN_NAME = "model.layers.1.mlp.down_proj.weight"
NAN_B = {**B, NAN_NAME: B[NAN_NAME].clone()}
NAN_B[NAN_NAME][3, 5] = float("nan")
MODEL_NAN = write_folder(os.path.join(work, "nan"), NAN_B)
EXTRA_NAME = "model.layers.0.mlp.extra_proj.weight"
PARTIAL_EXTRA = write_folder(os.path.join(work, "partial-extra"),
                             {**{n: B[n] for n in PARTIAL_NAMES}, EXTRA_NAME: torch.ones(2, 2)})


def b_mixed_dtypes():
    """B's tensors as a trainer holds them: attention projections in bf16, the rest f32."""
    return [(n, t.to(torch.bfloat16) if "self_attn" in n else t) for n, t in sorted(B.items())]


def slime_entries(named, ranks):
    """slime's _send_to_colocated_engine for one bucket: every engine rank's entry (each
    rank's MultiprocessingSerializer.serialize(..., output_str=True) is a base64 string;
    refit's carrier is base64 of JSON text, or the JSON object itself), and an empty
    bucket for a rank with nothing to send (_empty_flattened_tensor_data)."""
    carrier = wb.flatten_bucket(named)
    entries = [base64.b64encode(wb.entry_bytes(carrier)).decode(), carrier][:ranks]
    return entries + [{"flattened_tensor": "", "metadata": []}]


def one_dtype_bucket(named):
    """A FlattenedTensorBucket without supports_multi_dtypes: one dtype, flattened in that
    dtype (torch.cat of the flattened tensors), indices counted in elements."""
    metadata, flats, at = [], [], 0
    for name, t in named:
        metadata.append({"name": name, "shape": list(t.shape), "dtype": wb.dtype_name(t.dtype), "start_idx": at,
                         "end_idx": at + t.numel(), "numel": t.numel()})
        flats.append(t.reshape(-1))
        at += t.numel()
    flat = torch.cat(flats)
    return {"flattened_tensor": base64.b64encode(wb.tensor_bytes(flat)).decode(),
            "flattened_dtype": wb.dtype_name(flat.dtype), "metadata": metadata}


server = Server(MODEL_A)
fresh_b = Server(MODEL_B)
fresh_ap = Server(MODEL_AP)
try:
    base = server.greedy_all()
    on_b = fresh_b.greedy_all()
    on_ap = fresh_ap.greedy_all()
    check(all(isinstance(x[0], list) for x in base + on_b + on_ap), f"completions failed: {base} {on_b} {on_ap}")
    check(on_b != base, "B's weights give A's tokens: the test could not see an update")
    check(on_ap != base, "the partial tensors change nothing: the partial test could not see them")
    check(server.label() == "1", f"initial label {server.label()}")

    # ---- bad inputs: each a clear 4xx, nothing changes ----------------------------------
    q = "model.layers.0.self_attn.q_proj.weight"
    k = "model.layers.0.self_attn.k_proj.weight"
    good = wb.flatten_bucket([(q, B[q]), (k, B[k])])
    qb, kb = B[q].numel() * 4, B[k].numel() * 4

    def bucket_with(**meta_changes):
        c = json.loads(json.dumps(good))
        for i, change in meta_changes.items():
            c["metadata"][int(i[1:])].update(change)
        return c

    pickle_b64 = base64.b64encode(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.").decode()
    shm_seg = wb.write_shm_bucket([(q, B[q])])
    bad_cases = [
        # SGLang's own serializer output: refused with why and what to send instead.
        ({"serialized_named_tensors": [pickle_b64], "load_format": "flattened_bucket"}, "pickle", "CUDA IPC"),
        ({"serialized_named_tensors": [pickle_b64]}, "pickle", "weight_bucket.py"),
        ({"serialized_named_tensors": ["\x80\x04\x95junk"], "load_format": "flattened_bucket"}, "pickle", None),
        ({"serialized_named_tensors": [bucket_with(m1={"end_idx": qb + kb + 4})], "load_format": "flattened_bucket"},
         k, "outside"),
        ({"serialized_named_tensors": [bucket_with(m0={"numel": qb - 4})], "load_format": "flattened_bucket"},
         q, "numel"),
        ({"serialized_named_tensors": [bucket_with(m0={"shape": [64, 63]})], "load_format": "flattened_bucket"},
         q, "prod(shape)"),
        ({"serialized_named_tensors": [bucket_with(m1={"start_idx": qb - 4, "end_idx": qb - 4 + kb})],
          "load_format": "flattened_bucket"}, "overlap", k),
        ({"serialized_named_tensors": [bucket_with(m1={"dtype": "float7"})], "load_format": "flattened_bucket"},
         "float7", k),
        # a consistent bucket whose tensor has the wrong shape for its parameter
        ({"serialized_named_tensors": [wb.flatten_bucket([(q, B[q].reshape(32, 128))])],
          "load_format": "flattened_bucket"}, q, "shape"),
        # one good tensor and one bad one: the transaction refuses both
        ({"serialized_named_tensors": [wb.flatten_bucket([(k, B[k]), (q, B[q][:32])])],
          "load_format": "flattened_bucket"}, q, None),
        ({"serialized_named_tensors": [wb.flatten_bucket([("model.layers.9.nothing.weight", B[q])])],
          "load_format": "flattened_bucket"}, "model.layers.9.nothing.weight", None),
        ({"serialized_named_tensors": [wb.named_tensors_entry([(q, B[q])])], "load_format": "flattened_bucket"},
         "flattened_bucket", None),
        ({"serialized_named_tensors": [good]}, "list", None),
        ({"serialized_named_tensors": [good], "load_format": "sharded"}, "sharded", "load_format"),
        ({"serialized_named_tensors": [wb.flatten_bucket([(q, B[q])]), wb.flatten_bucket([(q, A[q])])],
          "load_format": "flattened_bucket"}, q, "differs"),
        ({"serialized_named_tensors": [{"flattened_tensor": {"shm": "../../etc/passwd"}, "metadata": good["metadata"]}],
          "load_format": "flattened_bucket"}, "segment name", None),
        ({"serialized_named_tensors": [{"flattened_tensor": {"shm": "/dev/shm/refit-no-such-segment"},
                                        "metadata": good["metadata"]}], "load_format": "flattened_bucket"},
         "refit-no-such-segment", None),
        ({"serialized_named_tensors": [{**shm_seg[0], "flattened_tensor": {**shm_seg[0]["flattened_tensor"],
                                                                           "nbytes": qb + 8}}],
          "load_format": "flattened_bucket"}, "holds", None),
        ({"serialized_named_tensors": [good], "named_tensors": [], "load_format": "flattened_bucket"}, "both", None),
        ({"load_format": "flattened_bucket"}, "serialized_named_tensors", None),
        ({"serialized_named_tensors": [], "load_format": "flattened_bucket"}, "non-empty", None),
        ({"serialized_named_tensors": [{"flattened_tensor": "", "metadata": []}], "load_format": "flattened_bucket"},
         "no tensors", None),
        ({"serialized_named_tensors": [good], "load_format": "flattened_bucket", "abort_all_requests": "yes"},
         "abort_all_requests", None),
        ({"serialized_named_tensors": [good], "load_format": "flattened_bucket", "weight_version": 7},
         "weight_version", None),
        # non-finite values are refused by default, naming the tensor and the element
        ({"serialized_named_tensors": [wb.flatten_bucket([(k, B[k]), (NAN_NAME, NAN_B[NAN_NAME])])],
          "load_format": "flattened_bucket"}, NAN_NAME, "element [3, 5] is nan"),
        ({"serialized_named_tensors": [good], "load_format": "flattened_bucket", "check_finite": "no"},
         "check_finite", None),
        ({"serialized_named_tensors": [good], "load_format": "flattened_bucket", "ignore_unknown_tensors": 1},
         "ignore_unknown_tensors", None),
    ]
    for body, want1, want2 in bad_cases:
        status, j = server.post("/update_weights_from_tensor", body)
        msg = j.get("message", "")
        check(400 <= status < 500 and j.get("success") is False and want1 in msg and (want2 is None or want2 in msg),
              f"bad tensor update {json.dumps(body)[:160]}: {status} {msg[:300]}")
    shm_seg[1].close()
    shm_seg[1].unlink()
    disk_cases = [
        ({"model_path": MODEL_B, "load_format": "pt"}, "'pt'", "load_format"),
        ({"model_path": MODEL_B, "load_format": "dummy"}, "'dummy'", None),
        ({"model_path": MODEL_B, "load_format": "gguf"}, "gguf", "hf_folder"),
        ({"model_path": MODEL_B, "load_format": "no-such-format"}, "no-such-format", None),
        ({"model_path": MODEL_B, "abort_all_requests": "yes"}, "abort_all_requests", None),
        ({"model_path": MODEL_B, "weight_version": 5}, "weight_version", None),
        ({"model_path": MODEL_B, "token_step": "x"}, "token_step", None),
        ({"model_path": MODEL_B, "is_async": 1}, "is_async", None),
        ({"load_format": "auto"}, "model_path", None),
        ({"model_path": os.path.join(work, "missing")}, "missing", None),
        ({"model_path": NOTHING}, "'model.layers.0.unrelated.weight'", "ignore_unknown_tensors"),
        ({"model_path": NOTHING, "ignore_unknown_tensors": True}, "none of the served model's tensors", None),
        ({"model_path": PARTIAL_EXTRA}, EXTRA_NAME, "no parameter of the served model takes"),
        ({"model_path": OTHER_MODEL}, "does not match", "hidden_size: checkpoint 128, served 64"),
        ({"model_path": MODEL_NAN}, NAN_NAME, "element [3, 5] is nan"),
        ({"model_path": MODEL_B, "check_finite": 0}, "check_finite", None),
    ]
    for body, want1, want2 in disk_cases:
        status, j = server.post("/update_weights_from_disk", body)
        msg = j.get("message", "")
        check(400 <= status < 500 and j.get("success") is False and want1 in msg and (want2 is None or want2 in msg),
              f"bad disk update {body}: {status} {msg[:300]}")
    status, j = server.post("/update_weight_version", {"abort_all_requests": False})
    check(status == 400 and "new_version" in j.get("message", ""), f"update_weight_version without new_version: {status} {j}")
    check(server.greedy_all() == base, "a refused update changed the outputs")
    check(server.label() == "1", f"a refused update changed the label: {server.label()}")

    # ---- slime: flattened buckets from tensors -----------------------------------------
    named = b_mixed_dtypes()
    thirds = [named[i::3] for i in range(3)]
    for step, bucket in enumerate(thirds):
        payload = {"serialized_named_tensors": slime_entries(bucket, ranks=2), "load_format": "flattened_bucket",
                   "flush_cache": False, "weight_version": "slime-1"}
        j = expect_ok(server, "/update_weights_from_tensor", payload, f"slime bucket {step}")
        check(j.get("weight_version") == "slime-1", f"slime bucket {step} label: {j}")
        if step == 0:
            check(server.greedy_all() not in (base, on_b), "after one of three buckets: neither A nor B expected")
    check(server.greedy_all() == on_b, "after slime's buckets: not bitwise the fresh server on B")
    check(server.label() == "slime-1", f"label after slime: {server.label()}")

    # ---- AReaL: disk update between pause and continue, with its misspelt field --------
    check(server.post("/pause_generation")[0] == 200, "AReaL's pause_generation")
    j = expect_ok(server, "/update_weights_from_disk", dict(model_path=str(MODEL_A), abort_all_request=True),
                  "AReaL disk update")
    check("num_paused_requests" in j, f"disk reply lacks num_paused_requests: {j}")
    check(server.post("/continue_generation")[0] == 200, "AReaL's continue_generation")
    check(server.greedy_all() == base, "after AReaL's disk update back to A: not bitwise the first answers")
    check(server.label() == "slime-1", f"an update naming no version must keep the label (SGLang): {server.label()}")

    # ---- verl: HttpServerAdapter.update_weights_from_tensor (load_format None) ---------
    serialized = [wb.entry_bytes(wb.named_tensors_entry(named))]  # what req.serialized_named_tensors holds
    payload = {"serialized_named_tensors": [base64.b64encode(t).decode("utf-8") for t in serialized],
               "load_format": None, "flush_cache": True}
    expect_ok(server, "/update_weights_from_tensor", payload, "verl tensor update")
    check(server.greedy_all() == on_b, "after verl's update: not bitwise the fresh server on B")

    # ---- slime's disk path: pause, flush_cache, update_weights_from_disk, continue ------
    # (slime's fork miles/backends/sglang_utils/sglang_engine.py SGLangEngine.
    # update_weights_from_disk posts {model_path, torch_empty_cache: True, load_format,
    # weight_version}; the stored THUDM/slime sglang_engine.py has no disk method.)
    check(server.post("/pause_generation", {})[0] == 200, "slime pause_generation")
    check(server.request("GET", "/flush_cache")[0] == 200, "slime flush_cache")
    j = expect_ok(server, "/update_weights_from_disk", {"model_path": MODEL_A, "torch_empty_cache": True,
                                                        "load_format": "auto", "weight_version": "3"}, "slime disk update")
    check(j.get("weight_version") == "3" and server.label() == "3", f"slime disk update label: {j}")
    check(server.post("/continue_generation", {})[0] == 200, "slime continue_generation")
    check(server.greedy_all() == base, "after slime's disk update back to A: not bitwise the first answers")

    # ---- one-dtype buckets back to A (slime's path without supports_multi_dtypes) -------
    by_dtype = {}
    for n, t in sorted(A.items()):
        by_dtype.setdefault(t.dtype, []).append((n, t))
    for dtype, group in by_dtype.items():
        expect_ok(server, "/update_weights_from_tensor",
                  {"serialized_named_tensors": [one_dtype_bucket(group)], "load_format": "flattened_bucket",
                   "weight_version": "slime-2"}, f"one-dtype bucket {dtype}")
    check(server.greedy_all() == base, "after one-dtype buckets back to A: not bitwise the first answers")

    # ---- shared memory, and an unknown field -------------------------------------------
    carrier, segment = wb.write_shm_bucket(named)
    try:
        expect_ok(server, "/update_weights_from_tensor",
                  wb.update_request([carrier], "flattened_bucket", weight_version="shm-1", a_future_field={"x": 1}),
                  "shared-memory bucket")
    finally:
        segment.close()
        segment.unlink()
    check(server.greedy_all() == on_b, "after the shared-memory bucket: not bitwise the fresh server on B")
    # "direct" back to A, and refit's own schema still works
    expect_ok(server, "/update_weights_from_tensor",
              wb.update_request([wb.named_tensors_entry(sorted(A.items()))], "direct"), "direct update")
    check(server.greedy_all() == base, "after the direct update back to A: not bitwise the first answers")
    expect_ok(server, "/update_weights_from_tensor", {"named_tensors": wb.named_tensors_entry([(q, A[q])])},
              "refit's named_tensors schema")

    # ---- a partial folder changes only its tensors -------------------------------------
    untouched = "model.layers.0.self_attn.k_proj.weight"
    before_untouched = server.weight(untouched)
    j = expect_ok(server, "/update_weights_from_disk", {"model_path": PARTIAL, "load_format": "safetensors"},
                  "partial folder")
    check(j.get("tensors_updated") == len(PARTIAL_NAMES), f"partial folder: {j}")
    report = j.get("report", {})
    check(sorted(report.get("tensor_names", [])) == sorted(PARTIAL_NAMES) and report.get("tensors_written") == 3
          and report.get("check_finite") is True and report.get("ignored") == [] and j.get("ignored") == []
          and report.get("bytes") == sum(B[n].numel() * 4 for n in PARTIAL_NAMES)
          and report.get("parameters_touched") == 3 and report.get("commit_seconds", -1) >= 0,
          f"partial folder report: {report}")
    # The same tensors beside one no parameter takes: listed as ignored when asked to.
    j = expect_ok(server, "/update_weights_from_disk", {"model_path": PARTIAL_EXTRA, "ignore_unknown_tensors": True,
                                                        "report_tensor_names": False}, "partial folder + extra")
    check(j.get("ignored") == [EXTRA_NAME] and j.get("report", {}).get("tensors_written") == 3
          and "tensor_names" not in j.get("report", {}), f"ignored tensor: {j}")
    check(server.greedy_all() == on_ap, "after the partial folder: not bitwise the fresh server on A + those tensors")
    check(server.weight(untouched) == before_untouched, "a tensor the partial folder lacks changed")
    check(server.weight(PARTIAL_NAMES[0]) == B[PARTIAL_NAMES[0]].reshape(-1).tolist(), "the partial tensor did not land")

    # ---- labels --------------------------------------------------------------------------
    status, j = server.post("/update_weight_version", {"new_version": "v9"})
    check(status == 200 and j.get("success") and j.get("new_version") == "v9", f"update_weight_version: {status} {j}")
    check(server.label() == "v9", f"label after update_weight_version: {server.label()}")
    check(server.greedy_all() == on_ap, "relabelling changed the weights")
    j = expect_ok(fresh_b, "/update_weights_from_disk", {"model_path": MODEL_B, "is_async": True, "torch_empty_cache": True,
                                                         "recapture_cuda_graph": True, "token_step": 3, "manifest": None},
                  "unlabelled update with every no-op field")
    check(j.get("weight_version") == "2" and j.get("token_step") == 3,
          f"a server never given a label counts versions: {j}")
    check(fresh_b.greedy_all() == on_b, "reloading B changed B's answers")

    # ---- keep_pause: generation waits until /continue_generation -------------------------
    j = expect_ok(server, "/update_weights_from_disk", {"model_path": MODEL_A, "keep_pause": True,
                                                        "weight_version": "final"}, "keep_pause update")
    check(j.get("weight_version") == "final", f"labelled disk update: {j}")
    result = []
    t = threading.Thread(target=lambda: result.append(server.greedy(PROMPTS[0])))
    t.start()
    t.join(1.5)
    check(t.is_alive(), "keep_pause: a request was served before /continue_generation")
    check(server.post("/continue_generation")[0] == 200, "continue_generation")
    t.join(60)
    check(result and result[0] == base[0], f"after continue: {result}")
    check(server.greedy_all() == base, "after the keep_pause update back to A: not bitwise the first answers")

    # ---- check_finite false: the operator's choice, the values taken as they are -------
    j = expect_ok(server, "/update_weights_from_disk", {"model_path": MODEL_NAN, "check_finite": False},
                  "NaN with check_finite false")
    check(j.get("report", {}).get("check_finite") is False, f"check_finite false report: {j}")
    j = expect_ok(server, "/update_weights_from_tensor",
                  {"serialized_named_tensors": [wb.flatten_bucket(sorted(A.items()))], "load_format": "flattened_bucket"},
                  "back to A from tensors")
    check(j.get("report", {}).get("tensors_written") == len(A) and "tensor_names" not in j.get("report", {}),
          f"a full update's report (names left out past 32): {j.get('report')}")
    check(server.greedy_all() == base, "after the NaN update and back to A: not bitwise the first answers")

    # ---- tensor parallel: every rank takes its slice of the same updates ---------------
    # (TP 2 equals TP 1 token for token; its logprobs differ in the last bits, as the
    # all-reduce sums in another order, so tokens are compared here.)
    if shutil.which("mpirun"):
        tp2 = Server(MODEL_A, tp=2)
        try:
            tokens = lambda outs: [o[0] for o in outs]
            check(tokens(tp2.greedy_all()) == tokens(base), "tp 2 on A: not A's tokens")
            for step, bucket in enumerate(thirds):
                expect_ok(tp2, "/update_weights_from_tensor",
                          {"serialized_named_tensors": slime_entries(bucket, ranks=2), "load_format": "flattened_bucket",
                           "flush_cache": False, "weight_version": "slime-1"}, f"tp 2 slime bucket {step}")
            check(tokens(tp2.greedy_all()) == tokens(on_b), "tp 2 after slime's buckets: not B's tokens")
            expect_ok(tp2, "/update_weights_from_disk", {"model_path": MODEL_A}, "tp 2 back to A")
            j = expect_ok(tp2, "/update_weights_from_disk", {"model_path": PARTIAL}, "tp 2 partial folder")
            check(j.get("tensors_updated") == len(PARTIAL_NAMES), f"tp 2 partial folder: {j}")
            check(tokens(tp2.greedy_all()) == tokens(on_ap), "tp 2 after the partial folder: not A + those tensors")
            check(tp2.weight(untouched) == before_untouched, "tp 2: a tensor the partial folder lacks changed")
            status, j = tp2.post("/update_weights_from_tensor", bad_cases[8][0])
            check(status == 400 and q in j.get("message", ""), f"tp 2 wrong-shaped bucket: {status} {j}")
            check(tokens(tp2.greedy_all()) == tokens(on_ap), "tp 2: a refused bucket changed the tokens")
            print("tensor-parallel part: done", flush=True)
        finally:
            tp2.stop()
    else:
        print("mpirun not found: skipping the tensor-parallel part")
finally:
    for s in (server, fresh_b, fresh_ap):
        s.stop()
    shutil.rmtree(work, ignore_errors=True)

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("SGLang weight-update protocol: all checks passed")
