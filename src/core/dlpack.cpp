#include "core/dlpack.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"

namespace refit {
namespace {

struct ExportContext {
  Tensor tensor;  // keeps the storage alive for the consumer
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

bool is_sub_byte(DType d) { return dtype_bits(d) < 8; }

DLDeviceType to_dlpack_device(DeviceType t) {
  switch (t) {
    case DeviceType::cpu:
      return kDLCPU;
    case DeviceType::cuda:
      return kDLCUDA;
    case DeviceType::rocm:
      return kDLROCM;
  }
  return kDLCPU;
}

Device from_dlpack_device(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost:
      return Device::cpu();
    case kDLCUDA:
    case kDLCUDAManaged:
      return Device{DeviceType::cuda, d.device_id};
    case kDLROCM:
      return Device{DeviceType::rocm, d.device_id};
    default:
      fail("DLPack import: device type {} is not supported (refit knows cpu, cuda and rocm)",
           static_cast<int>(d.device_type));
  }
}

// Fills the DLTensor fields shared by both structs. For packed sub-byte types, one
// DLPack element (lanes 2) is one byte, so the last dimension and strides halve.
void fill_dl_tensor(const Tensor& t, ExportContext* ctx, DLTensor* out) {
  ctx->shape = t.shape();
  ctx->strides = t.strides();
  if (is_sub_byte(t.dtype())) {
    if (t.dim() == 0 || t.stride(-1) != 1 || t.size(-1) % 2 != 0 || t.offset() % 2 != 0)
      fail(
          "DLPack export: {} must be contiguous along an even last dimension at an even "
          "offset to pack two values per byte (got {})",
          dtype_name(t.dtype()), t.str());
    for (size_t i = 0; i + 1 < ctx->strides.size(); ++i) {
      if (ctx->strides[i] % 2 != 0)
        fail("DLPack export: {} stride {} of dimension {} splits a byte", dtype_name(t.dtype()),
             ctx->strides[i], i);
      ctx->strides[i] /= 2;
    }
    ctx->shape.back() /= 2;
  }
  out->data = t.numel() > 0 ? t.raw_data() : t.storage()->data();
  out->device = DLDevice{to_dlpack_device(t.device().type), t.device().index};
  out->ndim = static_cast<int32_t>(t.dim());
  out->dtype = to_dlpack_dtype(t.dtype());
  out->shape = ctx->shape.data();
  out->strides = ctx->strides.data();
  out->byte_offset = 0;
}

// Wraps a DLTensor's memory as a refit tensor; `release` is the producer's deleter.
Tensor wrap_dl_tensor(const DLTensor& dl, bool read_only, std::function<void()> release) {
  try {
    if (dl.ndim < 0 || dl.ndim > 16) fail("DLPack import: ndim {} is out of range", dl.ndim);
    if (dl.ndim > 0 && dl.shape == nullptr) fail("DLPack import: shape is NULL");
    DType dtype = from_dlpack_dtype(dl.dtype);
    Device device = from_dlpack_device(dl.device);
    const bool packed = is_sub_byte(dtype);
    Shape shape(dl.shape, dl.shape + dl.ndim);
    for (int64_t d : shape)
      if (d < 0) fail("DLPack import: negative dimension in shape {}", shape_str(shape));
    Shape strides =
        dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    int64_t max_offset = 0;  // in DLPack elements
    for (int i = 0; i < dl.ndim; ++i) {
      if (strides[i] < 0)
        fail("DLPack import: negative stride {} in dimension {} is not supported", strides[i], i);
      if (shape[i] > 0) max_offset += strides[i] * (shape[i] - 1);
    }
    const int64_t elem_bytes = (dl.dtype.bits * dl.dtype.lanes + 7) / 8;
    const size_t nbytes = numel == 0 ? 0 : static_cast<size_t>((max_offset + 1) * elem_bytes);
    if (packed) {
      if (dl.ndim == 0 || strides.back() != 1)
        fail("DLPack import: packed {} must be contiguous along its last dimension",
             dtype_name(dtype));
      for (auto& s : strides) s *= 2;
      strides.back() = 1;
      shape.back() *= 2;
    }
    void* base = static_cast<uint8_t*>(dl.data) + dl.byte_offset;
    auto storage = Storage::wrap(base, nbytes, device, std::move(release), !read_only);
    release = nullptr;
    Tensor t = Tensor::from_storage(std::move(storage), dtype, shape, strides, 0);
    return t;
  } catch (...) {
    if (release) release();
    throw;
  }
}

}  // namespace

DLDataType to_dlpack_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f64:
      return {kDLFloat, 64, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::f8_e4m3fn:
      return {kDLFloat8_e4m3fn, 8, 1};
    case DType::f8_e5m2:
      return {kDLFloat8_e5m2, 8, 1};
    case DType::e8m0:
      return {kDLFloat8_e8m0fnu, 8, 1};
    case DType::f4_e2m1:
      return {kDLFloat4_e2m1fn, 4, 2};
    case DType::i8:
      return {kDLInt, 8, 1};
    case DType::u8:
      return {kDLUInt, 8, 1};
    case DType::i16:
      return {kDLInt, 16, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::boolean:
      return {kDLBool, 8, 1};
  }
  REFIT_ASSERT(false);
}

DType from_dlpack_dtype(DLDataType d) {
  auto bad = [&](const char* why) -> DType {
    fail("DLPack import: dtype (code {}, bits {}, lanes {}) is not supported: {}", d.code, d.bits,
         d.lanes, why);
  };
  if (d.code == kDLFloat4_e2m1fn) {
    if (d.bits == 4 && d.lanes == 2) return DType::f4_e2m1;
    return bad("float4_e2m1fn is accepted as bits 4 with lanes 2 (two values per byte)");
  }
  if (d.lanes != 1) return bad("vector lanes are not supported");
  switch (d.code) {
    case kDLFloat:
      if (d.bits == 32) return DType::f32;
      if (d.bits == 16) return DType::f16;
      if (d.bits == 64) return DType::f64;
      return bad("float of this width");
    case kDLBfloat:
      if (d.bits == 16) return DType::bf16;
      return bad("bfloat must be 16 bits");
    case kDLInt:
      if (d.bits == 8) return DType::i8;
      if (d.bits == 16) return DType::i16;
      if (d.bits == 32) return DType::i32;
      if (d.bits == 64) return DType::i64;
      return bad("int of this width");
    case kDLUInt:
      if (d.bits == 8) return DType::u8;
      return bad("unsigned ints other than 8 bits");
    case kDLBool:
      if (d.bits == 8) return DType::boolean;
      return bad("bool must be 8 bits");
    case kDLFloat8_e4m3fn:
      if (d.bits == 8) return DType::f8_e4m3fn;
      return bad("float8 must be 8 bits");
    case kDLFloat8_e5m2:
      if (d.bits == 8) return DType::f8_e5m2;
      return bad("float8 must be 8 bits");
    case kDLFloat8_e8m0fnu:
      if (d.bits == 8) return DType::e8m0;
      return bad("float8 must be 8 bits");
    case kDLComplex:
      return bad("complex numbers");
    default:
      return bad("refit has no matching dtype (fnuz, e3m4, b11 and float6 variants)");
  }
}

DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& tensor) {
  if (!tensor.defined()) fail("DLPack export: the tensor is undefined");
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = tensor;
  auto managed = std::make_unique<DLManagedTensorVersioned>();
  fill_dl_tensor(tensor, ctx.get(), &managed->dl_tensor);
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->flags = tensor.read_only() ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  managed->manager_ctx = ctx.release();
  managed->deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  return managed.release();
}

DLManagedTensor* to_dlpack_legacy(const Tensor& tensor) {
  if (!tensor.defined()) fail("DLPack export: the tensor is undefined");
  switch (tensor.dtype()) {
    case DType::f8_e4m3fn:
    case DType::f8_e5m2:
    case DType::e8m0:
    case DType::f4_e2m1:
      fail(
          "DLPack export: {} has no type code before DLPack 1.0, so the legacy "
          "DLManagedTensor cannot carry it; use the versioned export, or export as_bytes() "
          "(a u8 view of the same memory)",
          dtype_name(tensor.dtype()));
    default:
      break;
  }
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = tensor;
  auto managed = std::make_unique<DLManagedTensor>();
  fill_dl_tensor(tensor, ctx.get(), &managed->dl_tensor);
  managed->manager_ctx = ctx.release();
  managed->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  return managed.release();
}

Tensor from_dlpack(DLManagedTensorVersioned* managed) {
  if (!managed) fail("DLPack import: NULL tensor");
  auto release = [managed] {
    if (managed->deleter) managed->deleter(managed);
  };
  if (managed->version.major != DLPACK_MAJOR_VERSION) {
    uint32_t major = managed->version.major;
    release();
    fail("DLPack import: major version {} is not supported (refit speaks {})", major,
         DLPACK_MAJOR_VERSION);
  }
  const bool read_only = managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY;
  return wrap_dl_tensor(managed->dl_tensor, read_only, release);
}

Tensor from_dlpack(DLManagedTensor* managed) {
  if (!managed) fail("DLPack import: NULL tensor");
  return wrap_dl_tensor(managed->dl_tensor, false, [managed] {
    if (managed->deleter) managed->deleter(managed);
  });
}

Tensor as_bytes(const Tensor& tensor) {
  if (!tensor.is_contiguous())
    fail("as_bytes: {} is not contiguous; its bytes are not one range", tensor.str());
  const int64_t first_byte = (tensor.offset() * dtype_bits(tensor.dtype())) / 8;
  Tensor bytes = Tensor::from_storage(tensor.storage(), DType::u8,
                                      {static_cast<int64_t>(tensor.nbytes())}, {1}, first_byte);
  bytes.set_read_only(tensor.read_only());
  return bytes;
}

}  // namespace refit
