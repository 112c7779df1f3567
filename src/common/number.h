// Numbers that come from outside the process (etcd, files, the database, HTTP, the command
// line): parsed without exceptions, with an error that names where the text came from.
//
// The whole text must be the number: no surrounding blanks, no sign on unsigned values, no
// trailing characters. Errors are kInvalidArgument with a message such as
//   etcd key /dgpu/epoch: "12x" is not a whole number
//   etcd key /dgpu/epoch: "99999999999999999999" is out of range
//   --timeout: "1.5.2" is not a number
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace dgpu::common {

StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view source);
StatusOr<uint64_t> ParseUint64(std::string_view text, std::string_view source);

// A finite decimal number: an optional '-', digits with an optional fraction (".5" and "5." too)
// and an optional exponent ("1e3"). No '+', no hexadecimal, no "inf" or "nan". A value that a
// double cannot hold, too large or too small ("1e400", "1e-400"), is out of range.
StatusOr<double> ParseDouble(std::string_view text, std::string_view source);

// A size in bytes: a whole number with an optional unit, k, M, G, T (powers of 1000) or Ki, Mi,
// Gi, Ti (powers of 1024), each optionally followed by "B" ("512MiB", "1G", "100kB"), or "B"
// alone. Not negative; out of range beyond 2^62.
StatusOr<int64_t> ParseByteSize(std::string_view text, std::string_view source);

}  // namespace dgpu::common
