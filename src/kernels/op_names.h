// The name of every op, once: ops.cpp, paged_attention.cpp and matmul_quantized.cpp
// dispatch by these constants, kernels register under them, and the kernel tests walk
// kAllOps, so an op added here without kernels or test cases fails the tests instead
// of being forgotten.
#pragma once

namespace refit::op_names {

inline constexpr const char* matmul = "matmul";
inline constexpr const char* matmul_quantized = "matmul_quantized";
inline constexpr const char* quantize_per_token_fp8 = "quantize_per_token_fp8";
inline constexpr const char* quantize_per_block_q8 = "quantize_per_block_q8";
inline constexpr const char* rms_norm = "rms_norm";
inline constexpr const char* rope = "rope";
inline constexpr const char* softmax = "softmax";
inline constexpr const char* silu_mul = "silu_mul";
inline constexpr const char* gelu_tanh_mul = "gelu_tanh_mul";
inline constexpr const char* gelu_erf_mul = "gelu_erf_mul";
inline constexpr const char* scale = "scale";
inline constexpr const char* embedding = "embedding";
inline constexpr const char* add = "add";
inline constexpr const char* attention = "attention";
inline constexpr const char* paged_attention = "paged_attention";
inline constexpr const char* moe_route = "moe_route";
inline constexpr const char* moe_combine = "moe_combine";
inline constexpr const char* swiglu_oai_mul = "swiglu_oai_mul";

inline constexpr const char* kAllOps[] = {
    matmul,
    matmul_quantized,
    quantize_per_token_fp8,
    quantize_per_block_q8,
    rms_norm,
    rope,
    softmax,
    silu_mul,
    gelu_tanh_mul,
    gelu_erf_mul,
    scale,
    embedding,
    add,
    attention,
    paged_attention,
    moe_route,
    moe_combine,
    swiglu_oai_mul,
};

}  // namespace refit::op_names
