// Shared by the libFuzzer targets: a reader may throw refit::Error (FormatError for a bad
// file) and nothing else; any crash, sanitizer report, leak or oversized allocation is a bug.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/byte_source.h"

#define REFIT_FUZZ_GUARD(body)      \
  try {                             \
    body;                           \
  } catch (const ::refit::Error&) { \
  }
