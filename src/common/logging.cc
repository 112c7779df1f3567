#include "common/logging.h"

#include <spdlog/details/file_helper.h>
#include <spdlog/formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <utility>

#include "common/time_util.h"

namespace dgpu::common {
namespace {

// A structured record travels through spdlog as an encoded payload, marked by this address in
// the record's source location (an address no ordinary message can forge). The payload is a
// sequence of fields, each: <key length>:<key><kind><value length>:<value>, where kind is 's'
// for a string and 'r' for a JSON literal (number, bool). The first field is "msg" or "event".
constexpr char kStructuredMarker[] = "dgpu-structured-record";

// The logger SetupLogging installed; structured payloads are only sent to it.
std::atomic<const spdlog::logger*> g_structured_logger{nullptr};

// A file appended to, that can be reopened at its path (spdlog's basic_file_sink cannot).
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ReopenableFileSink(const std::string& path) : file_(Open(path)) {}

  Status Reopen() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<spdlog::details::file_helper> next;
    try {
      next = Open(file_->filename());
    } catch (const std::exception& e) {
      return Unavailable("cannot reopen the log file \"" + file_->filename() + "\": " + e.what());
    }
    file_->flush();
    file_ = std::move(next);  // The old file is closed here.
    return OkStatus();
  }

 private:
  static std::unique_ptr<spdlog::details::file_helper> Open(const std::string& path) {
    auto file = std::make_unique<spdlog::details::file_helper>();
    file->open(path, /*truncate=*/false);
    return file;
  }

  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_->write(line);
  }
  void flush_() override { file_->flush(); }

  std::unique_ptr<spdlog::details::file_helper> file_;  // GUARDED_BY(mutex_)
};

// The file sink of the installed logger, if it writes to a file.
std::mutex g_file_sink_mu;
std::shared_ptr<ReopenableFileSink> g_file_sink;  // GUARDED_BY(g_file_sink_mu)

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

void Append(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t length;
  uint32_t code_point;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
    code_point = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    code_point = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    code_point = c & 0x07;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  const bool overlong =
      (length == 3 && code_point < 0x800) || (length == 4 && code_point < 0x10000);
  const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  if (overlong || surrogate || code_point > 0x10FFFF) return 0;
  return length;
}

// Appends `text` as a JSON string, quotes included.
void AppendJsonString(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        Append(dest, "\\\"");
        ++i;
        continue;
      case '\\':
        Append(dest, "\\\\");
        ++i;
        continue;
      case '\n':
        Append(dest, "\\n");
        ++i;
        continue;
      case '\r':
        Append(dest, "\\r");
        ++i;
        continue;
      case '\t':
        Append(dest, "\\t");
        ++i;
        continue;
      case '\b':
        Append(dest, "\\b");
        ++i;
        continue;
      case '\f':
        Append(dest, "\\f");
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      Append(dest, buf);
      ++i;
      continue;
    }
    const size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      Append(dest, "\\ufffd");
      ++i;
      continue;
    }
    Append(dest, text.substr(i, length));
    i += length;
  }
  dest.push_back('"');
}

bool NeedsTextQuoting(std::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return true;
    }
  }
  return false;
}

// Appends `text` with control characters escaped so a record stays on one line.
void AppendTextEscaped(spdlog::memory_buf_t& dest, std::string_view text, bool escape_quotes) {
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      Append(dest, "\\n");
    } else if (c == '\r') {
      Append(dest, "\\r");
    } else if (c == '\t') {
      Append(dest, "\\t");
    } else if (escape_quotes && (c == '"' || c == '\\')) {
      dest.push_back('\\');
      dest.push_back(c);
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      Append(dest, buf);
    } else {
      dest.push_back(c);
    }
  }
}

void AppendTextValue(spdlog::memory_buf_t& dest, std::string_view value) {
  if (!NeedsTextQuoting(value)) {
    Append(dest, value);
    return;
  }
  dest.push_back('"');
  AppendTextEscaped(dest, value, /*escape_quotes=*/true);
  dest.push_back('"');
}

// ---------------------------------------------------------------------------------------------
// Payload encoding.

void EncodeField(std::string& out, std::string_view key, char kind, std::string_view value) {
  out += std::to_string(key.size());
  out += ':';
  out += key;
  out += kind;
  out += std::to_string(value.size());
  out += ':';
  out += value;
}

void EncodeValue(std::string& out, std::string_view key, const LogValue& value) {
  char buf[64];
  std::to_chars_result result{buf, std::errc()};
  switch (value.kind()) {
    case LogValue::Kind::kString:
      EncodeField(out, key, 's', value.string_value());
      return;
    case LogValue::Kind::kBool:
      EncodeField(out, key, 'r', value.bool_value() ? "true" : "false");
      return;
    case LogValue::Kind::kSigned:
      result = std::to_chars(buf, buf + sizeof(buf), value.signed_value());
      break;
    case LogValue::Kind::kUnsigned:
      result = std::to_chars(buf, buf + sizeof(buf), value.unsigned_value());
      break;
    case LogValue::Kind::kDouble:
      if (!std::isfinite(value.double_value())) {  // JSON has no NaN or infinity
        EncodeField(
            out, key, 's',
            std::isnan(value.double_value()) ? "nan" : (value.double_value() > 0 ? "inf" : "-inf"));
        return;
      }
      result = std::to_chars(buf, buf + sizeof(buf), value.double_value());
      break;
  }
  EncodeField(out, key, 'r', std::string_view(buf, result.ptr - buf));
}

struct DecodedField {
  std::string_view key;
  char kind;
  std::string_view value;
};

// Reads "<n>:<n bytes>" at the front of `in`.
bool DecodeChunk(std::string_view& in, std::string_view* out) {
  const size_t colon = in.find(':');
  if (colon == std::string_view::npos) return false;
  size_t length = 0;
  const auto parsed = std::from_chars(in.data(), in.data() + colon, length);
  if (parsed.ptr != in.data() + colon || colon + 1 + length > in.size()) return false;
  *out = in.substr(colon + 1, length);
  in.remove_prefix(colon + 1 + length);
  return true;
}

bool DecodeField(std::string_view& in, DecodedField* field) {
  if (!DecodeChunk(in, &field->key) || in.empty()) return false;
  field->kind = in.front();
  in.remove_prefix(1);
  return DecodeChunk(in, &field->value);
}

std::string_view PayloadOf(const spdlog::details::log_msg& msg) {
  return std::string_view(msg.payload.data(), msg.payload.size());
}

bool IsStructured(const spdlog::details::log_msg& msg) {
  return msg.source.funcname == kStructuredMarker;
}

int64_t MicrosOf(const spdlog::details::log_msg& msg) {
  return std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch()).count();
}

// ---------------------------------------------------------------------------------------------
// Formatters.

class JsonLineFormatter final : public spdlog::formatter {
 public:
  explicit JsonLineFormatter(std::string component) : component_(std::move(component)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    Append(dest, "{\"ts\":\"");
    Append(dest, FormatRfc3339Millis(MicrosOf(msg)));
    Append(dest, "\",\"level\":\"");
    Append(dest, LevelName(msg.level));
    Append(dest, "\",\"component\":");
    AppendJsonString(dest, component_);
    if (IsStructured(msg)) {
      std::string_view in = PayloadOf(msg);
      DecodedField field;
      while (!in.empty() && DecodeField(in, &field)) {
        dest.push_back(',');
        if (field.key == "ts" || field.key == "level" || field.key == "component") {
          AppendJsonString(dest, "_" + std::string(field.key));
        } else {
          AppendJsonString(dest, field.key);
        }
        dest.push_back(':');
        if (field.kind == 'r') {
          Append(dest, field.value);
        } else {
          AppendJsonString(dest, field.value);
        }
      }
    } else {
      Append(dest, ",\"msg\":");
      AppendJsonString(dest, PayloadOf(msg));
    }
    Append(dest, "}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>(component_);
  }

 private:
  const std::string component_;
};

class TextLineFormatter final : public spdlog::formatter {
 public:
  explicit TextLineFormatter(std::string component) : component_(std::move(component)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    Append(dest, FormatRfc3339Millis(MicrosOf(msg)));
    dest.push_back(' ');
    const std::string_view level = LevelName(msg.level);
    Append(dest, level);
    for (size_t i = level.size(); i < 5; ++i) dest.push_back(' ');
    Append(dest, " [");
    AppendTextEscaped(dest, component_, /*escape_quotes=*/false);
    Append(dest, "] ");
    if (IsStructured(msg)) {
      std::string_view in = PayloadOf(msg);
      DecodedField field;
      bool first = true;
      while (!in.empty() && DecodeField(in, &field)) {
        if (!first) dest.push_back(' ');
        if (first && field.key == "msg") {
          AppendTextEscaped(dest, field.value, /*escape_quotes=*/false);
        } else {
          AppendTextEscaped(dest, field.key, /*escape_quotes=*/false);
          dest.push_back('=');
          AppendTextValue(dest, field.value);
        }
        first = false;
      }
    } else {
      AppendTextEscaped(dest, PayloadOf(msg), /*escape_quotes=*/false);
    }
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextLineFormatter>(component_);
  }

 private:
  const std::string component_;
};

// Renders the record as a plain one-line text message, for a default logger that is not ours.
std::string RenderPlain(std::string_view first_key, std::string_view first_value,
                        std::span<const LogField> fields) {
  std::string encoded;
  EncodeField(encoded, first_key, 's', first_value);
  for (const LogField& field : fields) EncodeValue(encoded, field.key, field.value);
  spdlog::memory_buf_t buffer;
  std::string_view in = encoded;
  DecodedField field;
  bool first = true;
  while (!in.empty() && DecodeField(in, &field)) {
    if (!first) buffer.push_back(' ');
    if (first && field.key == "msg") {
      Append(buffer, field.value);
    } else {
      Append(buffer, field.key);
      buffer.push_back('=');
      AppendTextValue(buffer, field.value);
    }
    first = false;
  }
  return std::string(buffer.data(), buffer.size());
}

void Emit(LogLevel level, std::string_view first_key, std::string_view first_value,
          std::span<const LogField> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  const spdlog::level::level_enum spd_level = ToSpdlog(level);
  if (logger == nullptr || !logger->should_log(spd_level)) return;
  if (logger != g_structured_logger.load(std::memory_order_acquire)) {
    logger->log(spd_level, RenderPlain(first_key, first_value, fields));
    return;
  }
  std::string payload;
  payload.reserve(64 + fields.size() * 32);
  EncodeField(payload, first_key, 's', first_value);
  for (const LogField& field : fields) EncodeValue(payload, field.key, field.value);
  logger->log(spdlog::source_loc{kStructuredMarker, 0, kStructuredMarker}, spd_level, payload);
}

}  // namespace

Status SetupLogging(const LoggingConfig& config, std::string_view component) {
  spdlog::sink_ptr sink;
  std::shared_ptr<ReopenableFileSink> file_sink;
  try {
    if (config.output == "stdout") {
      sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
    } else if (config.output == "stderr") {
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    } else {
      file_sink = std::make_shared<ReopenableFileSink>(config.output);
      sink = file_sink;
    }
  } catch (const std::exception& e) {
    return InvalidArgument("logging.output: cannot open \"" + config.output + "\": " + e.what());
  }
  auto logger = std::make_shared<spdlog::logger>(std::string(component), std::move(sink));
  if (config.format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonLineFormatter>(std::string(component)));
  } else {
    logger->set_formatter(std::make_unique<TextLineFormatter>(std::string(component)));
  }
  logger->set_level(ToSpdlog(config.level));
  logger->flush_on(spdlog::level::trace);
  g_structured_logger.store(logger.get(), std::memory_order_release);
  spdlog::set_default_logger(std::move(logger));
  std::lock_guard<std::mutex> lock(g_file_sink_mu);
  g_file_sink = std::move(file_sink);
  return OkStatus();
}

Status ReopenLogs() {
  std::shared_ptr<ReopenableFileSink> sink;
  {
    std::lock_guard<std::mutex> lock(g_file_sink_mu);
    sink = g_file_sink;
  }
  return sink ? sink->Reopen() : OkStatus();
}

void ReopenLogsOnSighup() {
  if (Status s = ReopenLogs(); !s.ok()) {
    spdlog::error("SIGHUP: {}", s.message());
    return;
  }
  spdlog::info("SIGHUP: log file reopened");
}

bool LogEnabled(LogLevel level) {
  const spdlog::logger* logger = spdlog::default_logger_raw();
  return logger != nullptr && logger->should_log(ToSpdlog(level));
}

void FlushLogs() {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (logger != nullptr) logger->flush();
}

void LogEvent(std::string_view event, std::span<const LogField> fields, LogLevel level) {
  Emit(level, "event", event, fields);
}

void Log(LogLevel level, std::string_view message, std::span<const LogField> fields) {
  Emit(level, "msg", message, fields);
}

}  // namespace dgpu::common
