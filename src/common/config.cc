#include "common/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "common/number.h"
#include "common/time_util.h"
#include "core/types.h"

#define DGPU_CONFIG_RETURN_IF_ERROR(expr) \
  do {                                    \
    ::dgpu::Status status_ = (expr);      \
    if (!status_.ok()) return status_;    \
  } while (0)

namespace dgpu::common {
namespace {

// ---------------------------------------------------------------------------------------------
// Enum spellings. The first entry for a value is its canonical name; later ones are aliases
// that are accepted but not advertised.

template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

constexpr EnumName<LogLevel> kLogLevels[] = {{"debug", LogLevel::kDebug},
                                             {"info", LogLevel::kInfo},
                                             {"warn", LogLevel::kWarn},
                                             {"error", LogLevel::kError},
                                             {"warning", LogLevel::kWarn}};
constexpr EnumName<LogFormat> kLogFormats[] = {{"json", LogFormat::kJson},
                                               {"text", LogFormat::kText}};
constexpr EnumName<SchedulerRole> kRoles[] = {{"master", SchedulerRole::kMaster},
                                              {"standby", SchedulerRole::kStandby},
                                              {"primary", SchedulerRole::kMaster}};
constexpr EnumName<ReplicationMode> kReplicationModes[] = {{"sync", ReplicationMode::kSync},
                                                           {"async", ReplicationMode::kAsync}};
constexpr EnumName<ElectionMethod> kElectionMethods[] = {{"none", ElectionMethod::kNone},
                                                         {"lease", ElectionMethod::kLease},
                                                         {"etcd", ElectionMethod::kEtcd}};
constexpr EnumName<AuthMode> kAuthModes[] = {
    {"none", AuthMode::kNone}, {"token", AuthMode::kToken}, {"jwt", AuthMode::kJwt}};
constexpr EnumName<GpuDetectionMethod> kDetectionMethods[] = {
    {"nvml", GpuDetectionMethod::kNvml},
    {"nvidia-smi", GpuDetectionMethod::kNvidiaSmi},
    {"fake", GpuDetectionMethod::kFake}};
constexpr EnumName<ExecutionMethod> kExecutionMethods[] = {{"process", ExecutionMethod::kProcess},
                                                           {"docker", ExecutionMethod::kDocker}};
constexpr EnumName<RunAs> kRunAs[] = {{"agent", RunAs::kAgent}, {"submitter", RunAs::kSubmitter}};
constexpr EnumName<Isolation> kIsolations[] = {
    {"auto", Isolation::kAuto}, {"cgroup", Isolation::kCgroup}, {"none", Isolation::kNone}};
constexpr EnumName<CpuBinding> kCpuBindings[] = {
    {"cpuset", CpuBinding::kCpuset}, {"quota", CpuBinding::kQuota}, {"none", CpuBinding::kNone}};

template <typename E, size_t N>
std::string_view NameOf(const EnumName<E> (&table)[N], E value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// "debug, info, warn, error": canonical names only.
template <typename E, size_t N>
std::string ListNames(const EnumName<E> (&table)[N]) {
  std::string out;
  std::vector<E> seen;
  for (const auto& entry : table) {
    if (std::find(seen.begin(), seen.end(), entry.value) != seen.end()) continue;
    seen.push_back(entry.value);
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

template <typename E, size_t N>
std::optional<E> LookupEnum(const EnumName<E> (&table)[N], std::string_view text) {
  const std::string lowered = ToLower(text);
  for (const auto& entry : table) {
    if (entry.name == lowered) return entry.value;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Message helpers.

// A double-quoted rendering of `s`, safe to embed in a one-line message.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// What a node is, for "got ..." parts of messages.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The allowed key closest to `key` when it is plausibly a typo, else "".
std::string_view ClosestKey(std::string_view key, std::span<const std::string_view> allowed) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (std::string_view candidate : allowed) {
    const size_t distance = EditDistance(key, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

Status Invalid(const std::string& key, const std::string& reason) {
  return InvalidArgument(key + ": " + reason);
}

bool ParseBool(std::string_view text, bool* out) {
  const std::string lowered = ToLower(text);
  if (lowered == "true" || lowered == "yes" || lowered == "on") {
    *out = true;
    return true;
  }
  if (lowered == "false" || lowered == "no" || lowered == "off") {
    *out = false;
    return true;
  }
  return false;
}

std::vector<std::string> SplitComma(std::string_view text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(start, end - start);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

// ---------------------------------------------------------------------------------------------
// Section: one YAML mapping whose keys have been checked, handing out typed values.

class Section {
 public:
  // Checks that `node` is a mapping (or null/absent, read as empty) whose keys are unique and
  // all in `allowed`. `path` is the dotted path of the mapping, "" for the document root.
  static StatusOr<Section> Open(const YAML::Node& node, std::string path,
                                std::initializer_list<std::string_view> allowed) {
    Section section;
    section.path_ = std::move(path);
    if (!node.IsDefined() || node.IsNull()) return section;
    if (!node.IsMap()) {
      const std::string where = section.path_.empty() ? "top level" : section.path_;
      return InvalidArgument(where + ": must be a mapping, got " + Describe(node));
    }
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) {
        const std::string where = section.path_.empty() ? "top level" : section.path_;
        return InvalidArgument(where + ": keys must be names, got " + Describe(entry.first));
      }
      const std::string& name = entry.first.Scalar();
      const std::string dotted = section.KeyPath(name);
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string message = "unknown key " + Quote(dotted);
        const std::string_view hint =
            ClosestKey(name, std::span<const std::string_view>(allowed.begin(), allowed.size()));
        if (!hint.empty()) message += " (did you mean " + Quote(hint) + "?)";
        return InvalidArgument(message);
      }
      for (const auto& [seen, unused] : section.entries_) {
        if (seen == name) return InvalidArgument("duplicate key " + Quote(dotted));
      }
      section.entries_.emplace_back(name, entry.second);
    }
    return section;
  }

  std::string KeyPath(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  // The node at `key`; an undefined node when the key is absent.
  YAML::Node Get(std::string_view key) const {
    for (const auto& [name, node] : entries_) {
      if (name == key) return node;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  // True when `key` is present with a non-null value.
  bool Has(std::string_view key) const {
    const YAML::Node node = Get(key);
    return node.IsDefined() && !node.IsNull();
  }

  StatusOr<Section> Child(std::string_view key,
                          std::initializer_list<std::string_view> allowed) const {
    return Open(Get(key), KeyPath(key), allowed);
  }

  Status ReadString(std::string_view key, std::string* out, bool allow_empty = true) const {
    if (!Has(key)) return CheckNonEmpty(key, *out, allow_empty);
    const YAML::Node node = Get(key);
    if (!node.IsScalar()) return Invalid(KeyPath(key), "must be a string, got " + Describe(node));
    *out = node.Scalar();
    return CheckNonEmpty(key, *out, allow_empty);
  }

  Status ReadBool(std::string_view key, bool* out) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    if (!node.IsScalar() || !ParseBool(node.Scalar(), out)) {
      return Invalid(KeyPath(key), "must be true or false, got " + Describe(node));
    }
    return OkStatus();
  }

  template <typename Int>
  Status ReadInt(std::string_view key, int64_t min, int64_t max, Int* out) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    int64_t value = 0;
    bool ok = node.IsScalar();
    if (ok) {
      const std::string& text = node.Scalar();
      const char* end = text.data() + text.size();
      const auto result = std::from_chars(text.data(), end, value);
      ok = result.ec == std::errc() && result.ptr == end && value >= min && value <= max;
    }
    if (!ok) {
      return Invalid(KeyPath(key), "must be an integer in [" + std::to_string(min) + ", " +
                                       std::to_string(max) + "], got " + Describe(node));
    }
    *out = static_cast<Int>(value);
    return OkStatus();
  }

  // Whether `key` holds the word `auto` (NodeResourcesConfig::kAuto where a key allows it).
  bool IsAuto(std::string_view key) const {
    const YAML::Node node = Get(key);
    return node.IsDefined() && node.IsScalar() && node.Scalar() == "auto";
  }

  // A scalar that is a finite number as a whole; nullopt for anything else.
  static std::optional<double> FiniteNumber(const YAML::Node& node) {
    if (!node.IsScalar()) return std::nullopt;
    const std::string& text = node.Scalar();
    const char* end = text.data() + text.size();
    double value = 0;
    const auto result = std::from_chars(text.data(), end, value);
    if (result.ec != std::errc() || result.ptr != end || !std::isfinite(value)) return std::nullopt;
    return value;
  }

  Status ReadFraction(std::string_view key, double* out) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    const std::optional<double> value = FiniteNumber(node);
    if (!value || *value < 0 || *value > 1) {
      return Invalid(KeyPath(key), "must be a number in [0, 1], got " + Describe(node));
    }
    *out = *value;
    return OkStatus();
  }

  // A number of CPUs with at most 3 decimals, as thousandths (or "auto" where `allow_auto`:
  // NodeResourcesConfig::kAuto). A CPU count is more than 0; a reserve may be 0.
  Status ReadCpus(std::string_view key, bool allow_auto, int64_t* out) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    if (allow_auto && IsAuto(key)) {
      *out = NodeResourcesConfig::kAuto;
      return OkStatus();
    }
    const std::optional<double> value = FiniteNumber(node);
    const double milli = value ? std::round(*value * 1000) : 0;
    const bool ok = value && (allow_auto ? *value > 0 : *value >= 0) && *value <= 65536 &&
                    std::abs(milli - *value * 1000) < 1e-6 * std::max(1.0, *value);
    if (ok) *out = static_cast<int64_t>(milli);
    if (!ok) {
      return Invalid(KeyPath(key), std::string("must be ") + (allow_auto ? "auto or " : "") +
                                       "a number of CPUs (at most 3 decimals), got " +
                                       Describe(node));
    }
    return OkStatus();
  }

  // A size in bytes (common::ParseByteSize): 1073741824, 512MiB, 1G.
  Status ReadByteSize(std::string_view key, int64_t* out) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    StatusOr<int64_t> value = InvalidArgument("");
    if (node.IsScalar()) value = ParseByteSize(node.Scalar(), "size");
    if (!value.ok()) {
      return Invalid(KeyPath(key),
                     "must be a size in bytes (a whole number, or with a unit: 512MiB, 1G), got " +
                         Describe(node));
    }
    *out = *value;
    return OkStatus();
  }

  enum class DurationRule { kPositive, kNonNegative };

  Status ReadDuration(std::string_view key, milliseconds* out,
                      DurationRule rule = DurationRule::kPositive) const {
    if (!Has(key)) return OkStatus();
    const YAML::Node node = Get(key);
    std::optional<milliseconds> value;
    if (node.IsScalar()) value = ParseDuration(node.Scalar());
    if (!value.has_value() || (rule == DurationRule::kPositive && value->count() <= 0)) {
      const char* what = rule == DurationRule::kPositive ? "must be a positive duration, got "
                                                         : "must be a non-negative duration, got ";
      return Invalid(KeyPath(key), what + Describe(node));
    }
    *out = *value;
    return OkStatus();
  }

  // A time limit: a duration of whole seconds, 0 to ten years (0: none).
  Status ReadTimeLimit(std::string_view key, int64_t* seconds) const {
    if (!Has(key)) return OkStatus();
    milliseconds value{0};
    DGPU_CONFIG_RETURN_IF_ERROR(ReadDuration(key, &value, DurationRule::kNonNegative));
    if (value.count() % 1000 != 0 || value.count() / 1000 > core::kMaxTimeLimitSeconds) {
      return Invalid(KeyPath(key),
                     "must be whole seconds up to 10 years (such as 90m, 2h, 7d), "
                     "got " +
                         Describe(Get(key)));
    }
    *seconds = value.count() / 1000;
    return OkStatus();
  }

  template <typename E, size_t N>
  Status ReadEnum(std::string_view key, const EnumName<E> (&table)[N], E* out) const {
    if (!Has(key)) return OkStatus();
    return ParseEnumNode(Get(key), KeyPath(key), table, out);
  }

  // A "host:port" address; empty is allowed only when `allow_empty`.
  Status ReadAddress(std::string_view key, std::string* out, bool allow_empty) const {
    DGPU_CONFIG_RETURN_IF_ERROR(ReadString(key, out, allow_empty));
    if (out->empty() || ParseHostPort(*out).has_value()) return OkStatus();
    return Invalid(KeyPath(key), "must be \"host:port\" or \":port\", got " + Quote(*out));
  }

  template <typename E, size_t N>
  static Status ParseEnumNode(const YAML::Node& node, const std::string& key_path,
                              const EnumName<E> (&table)[N], E* out) {
    std::optional<E> value;
    if (node.IsScalar()) value = LookupEnum(table, node.Scalar());
    if (!value.has_value()) {
      return Invalid(key_path, "must be one of " + ListNames(table) + "; got " + Describe(node));
    }
    *out = *value;
    return OkStatus();
  }

 private:
  Status CheckNonEmpty(std::string_view key, const std::string& value, bool allow_empty) const {
    if (allow_empty || !value.empty()) return OkStatus();
    return Invalid(KeyPath(key), "must not be empty");
  }

  std::string path_;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
};

using DurationRule = Section::DurationRule;

// Opens `key` of `parent` as a section, or returns its error from the enclosing function.
#define DGPU_OPEN_SECTION(var, parent, key, ...)    \
  auto var##_or = (parent).Child(key, __VA_ARGS__); \
  if (!var##_or.ok()) return var##_or.status();     \
  const Section& var = *var##_or

// `audit_file`: where the scheduler's logging.audit_file goes; nullptr for the agent, which has
// none.
Status ReadLogging(const Section& root, LoggingConfig* out, std::string* audit_file = nullptr) {
  const bool audit = audit_file != nullptr;
  auto logging_or = audit ? root.Child("logging", {"level", "format", "output", "audit_file"})
                          : root.Child("logging", {"level", "format", "output"});
  if (!logging_or.ok()) return logging_or.status();
  const Section& logging = *logging_or;
  DGPU_CONFIG_RETURN_IF_ERROR(logging.ReadEnum("level", kLogLevels, &out->level));
  DGPU_CONFIG_RETURN_IF_ERROR(logging.ReadEnum("format", kLogFormats, &out->format));
  DGPU_CONFIG_RETURN_IF_ERROR(logging.ReadString("output", &out->output, /*allow_empty=*/false));
  if (audit) DGPU_CONFIG_RETURN_IF_ERROR(logging.ReadString("audit_file", audit_file));
  return OkStatus();
}

Status ReadAuth(const Section& root, AuthConfig* out) {
  DGPU_OPEN_SECTION(auth, root, "auth",
                    {"mode", "allow_insecure_remote", "tokens_file", "jwt", "metrics_public"});
  DGPU_CONFIG_RETURN_IF_ERROR(auth.ReadEnum("mode", kAuthModes, &out->mode));
  DGPU_CONFIG_RETURN_IF_ERROR(auth.ReadBool("allow_insecure_remote", &out->allow_insecure_remote));
  DGPU_CONFIG_RETURN_IF_ERROR(auth.ReadString("tokens_file", &out->tokens_file));
  DGPU_CONFIG_RETURN_IF_ERROR(auth.ReadBool("metrics_public", &out->metrics_public));
  DGPU_OPEN_SECTION(jwt, auth, "jwt",
                    {"issuer", "audience", "hs256_secret_file", "rs256_public_key_file",
                     "user_claim", "teams_claim", "role_claim", "default_role", "clock_skew"});
  JwtConfig& j = out->jwt;
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("issuer", &j.issuer));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("audience", &j.audience));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("hs256_secret_file", &j.hs256_secret_file));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("rs256_public_key_file", &j.rs256_public_key_file));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("user_claim", &j.user_claim, false));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("teams_claim", &j.teams_claim, false));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("role_claim", &j.role_claim, false));
  DGPU_CONFIG_RETURN_IF_ERROR(jwt.ReadString("default_role", &j.default_role, false));
  if (!ParseRole(j.default_role)) {
    return Invalid("auth.jwt.default_role",
                   "must be one of viewer, user, operator, admin; got " + Quote(j.default_role));
  }
  DGPU_CONFIG_RETURN_IF_ERROR(
      jwt.ReadDuration("clock_skew", &j.clock_skew, DurationRule::kNonNegative));
  if (out->mode == AuthMode::kToken && out->tokens_file.empty()) {
    return Invalid("auth.tokens_file", "is required when auth.mode is \"token\"");
  }
  if (out->mode == AuthMode::kJwt) {
    if (j.issuer.empty())
      return Invalid("auth.jwt.issuer", "is required when auth.mode is \"jwt\"");
    if (j.audience.empty()) {
      return Invalid("auth.jwt.audience", "is required when auth.mode is \"jwt\"");
    }
    if (j.hs256_secret_file.empty() == j.rs256_public_key_file.empty()) {
      return Invalid("auth.jwt",
                     "needs exactly one of hs256_secret_file and rs256_public_key_file when "
                     "auth.mode is \"jwt\"");
    }
  }
  return OkStatus();
}

// A TLS client section (`ca_file`, `cert_file`, `key_file`) under `parent`.
Status ReadClientTls(const Section& parent, std::string_view key, ClientTlsConfig* out) {
  DGPU_OPEN_SECTION(tls, parent, key, {"ca_file", "cert_file", "key_file"});
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("ca_file", &out->ca_file));
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("cert_file", &out->cert_file));
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("key_file", &out->key_file));
  if (out->cert_file.empty() != out->key_file.empty()) {
    return Invalid(tls.KeyPath(out->cert_file.empty() ? "cert_file" : "key_file"),
                   "is required with " +
                       tls.KeyPath(out->cert_file.empty() ? "key_file" : "cert_file") +
                       " (a client certificate needs its key)");
  }
  if (!out->cert_file.empty() && out->ca_file.empty()) {
    return Invalid(tls.KeyPath("ca_file"),
                   "is required with a client certificate: the CA bundle that verifies the "
                   "server");
  }
  return OkStatus();
}

Status ReadServerTls(const Section& server, ServerTlsConfig* out) {
  DGPU_OPEN_SECTION(tls, server, "tls", {"cert_file", "key_file", "client_ca_file"});
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("cert_file", &out->cert_file));
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("key_file", &out->key_file));
  DGPU_CONFIG_RETURN_IF_ERROR(tls.ReadString("client_ca_file", &out->client_ca_file));
  if (out->cert_file.empty() != out->key_file.empty()) {
    return Invalid(
        tls.KeyPath(out->cert_file.empty() ? "cert_file" : "key_file"),
        "is required with " + tls.KeyPath(out->cert_file.empty() ? "key_file" : "cert_file"));
  }
  if (!out->client_ca_file.empty() && out->cert_file.empty()) {
    return Invalid(tls.KeyPath("client_ca_file"),
                   "needs server.tls.cert_file and key_file: client certificates are asked for "
                   "over TLS only");
  }
  return OkStatus();
}

// A "http://host:port" etcd endpoint (https too; a trailing '/' is tolerated).
bool IsEtcdEndpoint(std::string_view endpoint) {
  std::string_view rest;
  if (endpoint.starts_with("http://")) {
    rest = endpoint.substr(7);
  } else if (endpoint.starts_with("https://")) {
    rest = endpoint.substr(8);
  } else {
    return false;
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  const std::optional<HostPort> host_port = ParseHostPort(rest);
  return host_port.has_value() && !host_port->host.empty();
}

Status ReadEtcdEndpoints(const Section& ha, std::vector<std::string>* out) {
  if (!ha.Has("etcd_endpoints")) return OkStatus();
  const YAML::Node node = ha.Get("etcd_endpoints");
  const std::string key = ha.KeyPath("etcd_endpoints");
  std::vector<std::string> endpoints;
  if (node.IsScalar()) {
    endpoints = SplitComma(node.Scalar());
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (!node[i].IsScalar()) {
        return Invalid(key + "[" + std::to_string(i) + "]",
                       "must be a string, got " + Describe(node[i]));
      }
      endpoints.push_back(node[i].Scalar());
    }
  } else {
    return Invalid(key, "must be a list of \"http://host:port\", got " + Describe(node));
  }
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (!IsEtcdEndpoint(endpoints[i])) {
      return Invalid(key + "[" + std::to_string(i) + "]",
                     "must look like \"http://host:port\", got " + Quote(endpoints[i]));
    }
  }
  *out = std::move(endpoints);
  return OkStatus();
}

// gpu.fake.nvlink_groups: [[0, 1], [2, 3]], checked against gpu.fake.count.
Status ReadLinkGroups(const Section& fake, int count, std::vector<std::vector<int>>* out) {
  if (!fake.Has("nvlink_groups")) return OkStatus();
  const YAML::Node node = fake.Get("nvlink_groups");
  const std::string key = fake.KeyPath("nvlink_groups");
  if (!node.IsSequence()) {
    return Invalid(
        key, "must be a list of lists of GPU indices ([[0, 1], [2, 3]]), got " + Describe(node));
  }
  std::vector<std::vector<int>> groups;
  for (size_t g = 0; g < node.size(); ++g) {
    const std::string item = key + "[" + std::to_string(g) + "]";
    if (!node[g].IsSequence()) {
      return Invalid(item, "must be a list of GPU indices, got " + Describe(node[g]));
    }
    std::vector<int>& group = groups.emplace_back();
    for (size_t i = 0; i < node[g].size(); ++i) {
      const YAML::Node& index = node[g][i];
      int value = -1;
      const std::string& text = index.IsScalar() ? index.Scalar() : std::string();
      const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
      if (!index.IsScalar() || result.ec != std::errc() ||
          result.ptr != text.data() + text.size()) {
        return Invalid(item + "[" + std::to_string(i) + "]",
                       "must be a GPU index, got " + Describe(index));
      }
      group.push_back(value);
    }
  }
  if (std::string why = core::CheckLinkGroups(groups, count); !why.empty()) {
    return Invalid(key, why + " (gpu.fake.count is " + std::to_string(count) + ")");
  }
  *out = std::move(groups);
  return OkStatus();
}

Status ReadDetectionMethods(const Section& gpu, std::vector<GpuDetectionMethod>* out) {
  if (!gpu.Has("detection_method")) return OkStatus();
  const YAML::Node node = gpu.Get("detection_method");
  const std::string key = gpu.KeyPath("detection_method");
  std::vector<GpuDetectionMethod> methods;
  auto add = [&](const YAML::Node& item, const std::string& item_key) -> Status {
    GpuDetectionMethod method = GpuDetectionMethod::kNvml;
    DGPU_CONFIG_RETURN_IF_ERROR(Section::ParseEnumNode(item, item_key, kDetectionMethods, &method));
    if (std::find(methods.begin(), methods.end(), method) != methods.end()) {
      return Invalid(key, Quote(ToString(method)) + " is listed twice");
    }
    methods.push_back(method);
    return OkStatus();
  };
  if (node.IsScalar()) {
    const std::vector<std::string> names = SplitComma(node.Scalar());
    for (size_t i = 0; i < names.size(); ++i) {
      DGPU_CONFIG_RETURN_IF_ERROR(
          add(YAML::Node(names[i]), names.size() == 1 ? key : key + "[" + std::to_string(i) + "]"));
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      DGPU_CONFIG_RETURN_IF_ERROR(add(node[i], key + "[" + std::to_string(i) + "]"));
    }
  } else {
    return Invalid(key, "must be a method name or a list of them, got " + Describe(node));
  }
  if (methods.empty()) return Invalid(key, "must name at least one method");
  *out = std::move(methods);
  return OkStatus();
}

// quota.teams: {name: {online, batch, max_gpus, weight, default_time_limit}}.
Status ReadTeams(const Section& quota, std::map<std::string, TeamConfig>* out) {
  if (!quota.Has("teams")) return OkStatus();
  const YAML::Node node = quota.Get("teams");
  const std::string key = quota.KeyPath("teams");
  if (!node.IsMap()) return Invalid(key, "must be a mapping of team names, got " + Describe(node));
  std::map<std::string, TeamConfig> teams;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) return Invalid(key, "team names must be strings");
    const std::string& name = entry.first.Scalar();
    if (!core::IsValidTeamName(name)) {
      // The name is quoted, not made part of the key: it may hold anything, even a line break.
      return Invalid(key, "team name " + Quote(name) +
                              " is not valid: 1 to 63 characters of a-z, 0-9, '_' and '-', "
                              "starting with a letter or digit");
    }
    if (teams.count(name) != 0) return Invalid(key + "." + name, "is listed twice");
    auto section_or =
        Section::Open(entry.second, key + "." + name,
                      {"online", "batch", "max_gpus", "weight", "default_time_limit"});
    if (!section_or.ok()) return section_or.status();
    const Section& s = *section_or;
    TeamConfig t;
    constexpr int64_t kMaxGpus = 1 << 24;
    DGPU_CONFIG_RETURN_IF_ERROR(s.ReadInt("online", 0, kMaxGpus, &t.online));
    DGPU_CONFIG_RETURN_IF_ERROR(s.ReadInt("batch", 0, kMaxGpus, &t.batch));
    DGPU_CONFIG_RETURN_IF_ERROR(s.ReadInt("max_gpus", 0, kMaxGpus, &t.max_gpus));
    DGPU_CONFIG_RETURN_IF_ERROR(
        s.ReadTimeLimit("default_time_limit", &t.default_time_limit_seconds));
    if (s.Has("weight")) {
      const YAML::Node w = s.Get("weight");
      double value = 0;
      bool ok = w.IsScalar();
      if (ok) {
        const std::string& text = w.Scalar();
        const char* end = text.data() + text.size();
        const auto result = std::from_chars(text.data(), end, value);
        ok = result.ec == std::errc() && result.ptr == end && std::isfinite(value) && value > 0;
      }
      if (!ok) return Invalid(s.KeyPath("weight"), "must be a number above 0, got " + Describe(w));
      t.weight = value;
    }
    if (t.max_gpus >= 0 && t.online + t.batch > t.max_gpus) {
      return Invalid(s.KeyPath("max_gpus"), "must be at least online + batch (" +
                                                std::to_string(t.online + t.batch) + "), got " +
                                                std::to_string(t.max_gpus));
    }
    teams.emplace(name, t);
  }
  *out = std::move(teams);
  return OkStatus();
}

// A node group's name: the rule of team names (it becomes a program's argument).
Status CheckGroupName(const std::string& key, const std::string& name) {
  if (core::IsValidTeamName(name)) return OkStatus();
  return Invalid(key,
                 "must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a "
                 "letter or digit, got " +
                     Quote(name));
}

// autoscale: {enabled, scale_up_delay, idle_timeout, boot_timeout, program_timeout,
// retry_delay, node_groups: [{name, model, gpus_per_node, min_nodes, max_nodes,
// scale_up_program, scale_down_program}]}.
Status ReadAutoscale(const Section& root, AutoscaleConfig* out) {
  DGPU_OPEN_SECTION(section, root, "autoscale",
                    {"enabled", "scale_up_delay", "idle_timeout", "boot_timeout", "program_timeout",
                     "retry_delay", "node_groups"});
  AutoscaleConfig a;
  DGPU_CONFIG_RETURN_IF_ERROR(section.ReadBool("enabled", &a.enabled));
  DGPU_CONFIG_RETURN_IF_ERROR(
      section.ReadDuration("scale_up_delay", &a.scale_up_delay, DurationRule::kNonNegative));
  DGPU_CONFIG_RETURN_IF_ERROR(section.ReadDuration("idle_timeout", &a.idle_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(section.ReadDuration("boot_timeout", &a.boot_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(section.ReadDuration("program_timeout", &a.program_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(section.ReadDuration("retry_delay", &a.retry_delay));
  if (section.Has("node_groups")) {
    const YAML::Node list = section.Get("node_groups");
    const std::string key = section.KeyPath("node_groups");
    if (!list.IsSequence()) return Invalid(key, "must be a list of groups, got " + Describe(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string item = key + "[" + std::to_string(i) + "]";
      auto group_or = Section::Open(list[i], item,
                                    {"name", "model", "gpus_per_node", "min_nodes", "max_nodes",
                                     "scale_up_program", "scale_down_program"});
      if (!group_or.ok()) return group_or.status();
      const Section& g = *group_or;
      NodeGroupConfig n;
      DGPU_CONFIG_RETURN_IF_ERROR(g.ReadString("name", &n.name, false));
      DGPU_CONFIG_RETURN_IF_ERROR(CheckGroupName(g.KeyPath("name"), n.name));
      for (const NodeGroupConfig& other : a.node_groups) {
        if (other.name == n.name)
          return Invalid(g.KeyPath("name"), Quote(n.name) + " is listed twice");
      }
      DGPU_CONFIG_RETURN_IF_ERROR(g.ReadString("model", &n.model, false));
      DGPU_CONFIG_RETURN_IF_ERROR(g.ReadInt("gpus_per_node", 1, 1024, &n.gpus_per_node));
      DGPU_CONFIG_RETURN_IF_ERROR(g.ReadInt("max_nodes", 1, 100'000, &n.max_nodes));
      DGPU_CONFIG_RETURN_IF_ERROR(g.ReadInt("min_nodes", 0, n.max_nodes, &n.min_nodes));
      for (auto [name, program] : {std::pair{"scale_up_program", &n.scale_up_program},
                                   std::pair{"scale_down_program", &n.scale_down_program}}) {
        DGPU_CONFIG_RETURN_IF_ERROR(g.ReadString(name, program, false));
        if (!program->starts_with('/')) {
          return Invalid(g.KeyPath(name), "must be an absolute path, got " + Quote(*program));
        }
      }
      a.node_groups.push_back(std::move(n));
    }
  }
  if (a.enabled && a.node_groups.empty()) {
    return Invalid("autoscale.node_groups", "must list at least one group when enabled is true");
  }
  *out = std::move(a);
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Documents.

StatusOr<SchedulerConfig> ParseSchedulerDocument(const YAML::Node& document) {
  SchedulerConfig c;
  auto root_or =
      Section::Open(document, "",
                    {"server", "scheduler", "replication", "quota", "preemption", "agent",
                     "storage", "ha", "auth", "limits", "autoscale", "logging"});
  if (!root_or.ok()) return root_or.status();
  const Section& root = *root_or;

  DGPU_OPEN_SECTION(server, root, "server",
                    {"grpc_address", "http_address", "read_timeout", "max_connections", "tls"});
  DGPU_CONFIG_RETURN_IF_ERROR(server.ReadAddress("grpc_address", &c.server.grpc_address, false));
  DGPU_CONFIG_RETURN_IF_ERROR(server.ReadAddress("http_address", &c.server.http_address, false));
  DGPU_CONFIG_RETURN_IF_ERROR(server.ReadDuration("read_timeout", &c.server.read_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(
      server.ReadInt("max_connections", 1, 1'000'000, &c.server.max_connections));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadServerTls(server, &c.server.tls));

  DGPU_OPEN_SECTION(
      scheduler, root, "scheduler",
      {"role", "schedule_interval", "snapshot_interval", "max_attempts", "max_bypass", "id",
       "task_log_lines_per_second", "shutdown_timeout", "gang_port_range", "topology_key",
       "default_time_limit", "kill_invalid_dependencies", "backfill", "backfill_depth"});
  SchedulingConfig& s = c.scheduler;
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadEnum("role", kRoles, &s.role));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("schedule_interval", &s.schedule_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("snapshot_interval", &s.snapshot_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadInt("max_attempts", 1, 1000, &s.max_attempts));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadInt("max_bypass", 0, 1'000'000, &s.max_bypass));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadString("id", &s.id));
  DGPU_CONFIG_RETURN_IF_ERROR(
      scheduler.ReadInt("task_log_lines_per_second", 0, 1'000'000, &s.task_log_lines_per_second));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("shutdown_timeout", &s.shutdown_timeout));
  if (scheduler.Has("gang_port_range")) {
    std::string range;
    DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadString("gang_port_range", &range));
    int low = 0;
    int high = 0;
    char dash = 0;
    char extra = 0;
    if (std::sscanf(range.c_str(), "%d %c %d %c", &low, &dash, &high, &extra) != 3 || dash != '-' ||
        low < 1 || high > 65535 || low > high) {
      return Invalid(
          "scheduler.gang_port_range",
          "must be LOW-HIGH with 1 <= LOW <= HIGH <= 65535 (such as 29500-29999), got \"" + range +
              "\"");
    }
    s.gang_port_low = low;
    s.gang_port_high = high;
  }
  DGPU_CONFIG_RETURN_IF_ERROR(
      scheduler.ReadTimeLimit("default_time_limit", &s.default_time_limit_seconds));
  DGPU_CONFIG_RETURN_IF_ERROR(
      scheduler.ReadBool("kill_invalid_dependencies", &s.kill_invalid_dependencies));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadBool("backfill", &s.backfill));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadInt("backfill_depth", 1, 100'000, &s.backfill_depth));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadString("topology_key", &s.topology_key));
  if (!s.topology_key.empty()) {
    if (std::string why = core::CheckLabelKey(s.topology_key); !why.empty()) {
      return Invalid("scheduler.topology_key", "must be a node label key (such as rack): " +
                                                   Quote(s.topology_key) + " is not valid: " + why);
    }
  }

  DGPU_OPEN_SECTION(replication, root, "replication",
                    {"enabled", "peer_address", "heartbeat_interval", "heartbeat_timeout", "mode",
                     "sync_timeout", "tls"});
  ReplicationConfig& r = c.replication;
  DGPU_CONFIG_RETURN_IF_ERROR(replication.ReadBool("enabled", &r.enabled));
  DGPU_CONFIG_RETURN_IF_ERROR(replication.ReadAddress("peer_address", &r.peer_address, true));
  DGPU_CONFIG_RETURN_IF_ERROR(
      replication.ReadDuration("heartbeat_interval", &r.heartbeat_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(replication.ReadDuration("heartbeat_timeout", &r.heartbeat_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(replication.ReadEnum("mode", kReplicationModes, &r.mode));
  DGPU_CONFIG_RETURN_IF_ERROR(replication.ReadDuration("sync_timeout", &r.sync_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadClientTls(replication, "tls", &r.tls));
  if (r.enabled && c.server.tls.enabled() && !r.tls.enabled()) {
    return Invalid("replication.tls.ca_file",
                   "is required when server.tls is set: the peer scheduler's gRPC port speaks "
                   "TLS (both schedulers share one TLS set-up)");
  }
  if (r.enabled && !c.server.tls.client_ca_file.empty() && r.tls.cert_file.empty()) {
    return Invalid("replication.tls.cert_file",
                   "is required when server.tls.client_ca_file is set: the peer asks for a "
                   "client certificate (this scheduler's own certificate will do)");
  }
  if (r.enabled && r.peer_address.empty()) {
    return Invalid("replication.peer_address", "required when replication.enabled is true");
  }
  if (r.heartbeat_timeout <= r.heartbeat_interval) {
    return Invalid("replication.heartbeat_timeout",
                   "must be greater than replication.heartbeat_interval (" +
                       FormatDuration(r.heartbeat_interval) + "), got " +
                       FormatDuration(r.heartbeat_timeout));
  }

  DGPU_OPEN_SECTION(
      quota, root, "quota",
      {"online_percent", "batch_percent", "borrowing", "fairshare_half_life", "teams"});
  QuotaConfig& q = c.quota;
  DGPU_CONFIG_RETURN_IF_ERROR(quota.ReadBool("borrowing", &q.borrowing));
  DGPU_CONFIG_RETURN_IF_ERROR(quota.ReadDuration("fairshare_half_life", &q.fairshare_half_life));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadTeams(quota, &q.teams));
  DGPU_CONFIG_RETURN_IF_ERROR(quota.ReadFraction("online_percent", &q.online_percent));
  DGPU_CONFIG_RETURN_IF_ERROR(quota.ReadFraction("batch_percent", &q.batch_percent));
  const bool has_online = quota.Has("online_percent");
  const bool has_batch = quota.Has("batch_percent");
  if (has_online && has_batch) {
    if (std::fabs(q.online_percent + q.batch_percent - 1.0) > 1e-9) {
      char numbers[96];
      std::snprintf(numbers, sizeof(numbers), "%g + %g", q.online_percent, q.batch_percent);
      return Invalid("quota.batch_percent",
                     std::string("online_percent + batch_percent must equal 1, got ") + numbers);
    }
  } else if (has_online) {
    q.batch_percent = 1.0 - q.online_percent;
  } else if (has_batch) {
    q.online_percent = 1.0 - q.batch_percent;
  }

  DGPU_OPEN_SECTION(preemption, root, "preemption", {"grace_period", "min_runtime"});
  DGPU_CONFIG_RETURN_IF_ERROR(preemption.ReadDuration("grace_period", &c.preemption.grace_period,
                                                      DurationRule::kNonNegative));
  if (c.preemption.grace_period.count() % 1000 != 0) {
    return Invalid("preemption.grace_period",
                   "must be whole seconds, got " + FormatDuration(c.preemption.grace_period));
  }
  // The core takes it as an int32 number of seconds; a task's own preemption_grace_seconds has
  // the same bound.
  constexpr milliseconds kMaxGracePeriod{86'400'000};
  if (c.preemption.grace_period > kMaxGracePeriod) {
    return Invalid("preemption.grace_period", "must be at most " + FormatDuration(kMaxGracePeriod) +
                                                  ", got " +
                                                  FormatDuration(c.preemption.grace_period));
  }
  DGPU_CONFIG_RETURN_IF_ERROR(preemption.ReadDuration("min_runtime", &c.preemption.min_runtime,
                                                      DurationRule::kNonNegative));

  DGPU_OPEN_SECTION(agent, root, "agent", {"heartbeat_timeout", "max_gpus_per_node"});
  DGPU_CONFIG_RETURN_IF_ERROR(agent.ReadDuration("heartbeat_timeout", &c.agent.heartbeat_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(
      agent.ReadInt("max_gpus_per_node", 1, 1024, &c.agent.max_gpus_per_node));

  DGPU_OPEN_SECTION(storage, root, "storage",
                    {"snapshot_dir", "shared_storage", "retention", "fsync"});
  StorageConfig& st = c.storage;
  DGPU_CONFIG_RETURN_IF_ERROR(storage.ReadString("snapshot_dir", &st.snapshot_dir, false));
  DGPU_CONFIG_RETURN_IF_ERROR(storage.ReadString("shared_storage", &st.shared_storage));
  DGPU_CONFIG_RETURN_IF_ERROR(storage.ReadDuration("retention", &st.retention));
  DGPU_CONFIG_RETURN_IF_ERROR(storage.ReadBool("fsync", &st.fsync));

  DGPU_OPEN_SECTION(ha, root, "ha",
                    {"election", "etcd_endpoints", "lease_ttl", "etcd_prefix", "etcd_tls"});
  HaConfig& h = c.ha;
  h.election = st.shared_storage.empty() ? ElectionMethod::kNone : ElectionMethod::kLease;
  DGPU_CONFIG_RETURN_IF_ERROR(ha.ReadEnum("election", kElectionMethods, &h.election));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadEtcdEndpoints(ha, &h.etcd_endpoints));
  DGPU_CONFIG_RETURN_IF_ERROR(ha.ReadDuration("lease_ttl", &h.lease_ttl));
  DGPU_CONFIG_RETURN_IF_ERROR(ha.ReadString("etcd_prefix", &h.etcd_prefix, false));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadClientTls(ha, "etcd_tls", &h.etcd_tls));
  for (size_t i = 0; i < h.etcd_endpoints.size(); ++i) {
    if (h.etcd_tls.enabled() && !h.etcd_endpoints[i].starts_with("https://")) {
      return Invalid("ha.etcd_endpoints[" + std::to_string(i) + "]",
                     "must be https:// when ha.etcd_tls is set, got " + Quote(h.etcd_endpoints[i]));
    }
  }
  if (!h.etcd_prefix.starts_with('/')) {
    return Invalid("ha.etcd_prefix", "must start with '/', got " + Quote(h.etcd_prefix));
  }
  if (h.election == ElectionMethod::kLease && st.shared_storage.empty()) {
    return Invalid("ha.election", "\"lease\" requires storage.shared_storage to be set");
  }
  if (h.election == ElectionMethod::kEtcd && h.etcd_endpoints.empty()) {
    return Invalid("ha.etcd_endpoints",
                   "must list at least one endpoint when ha.election is "
                   "\"etcd\"");
  }

  DGPU_CONFIG_RETURN_IF_ERROR(ReadAuth(root, &c.auth));
  DGPU_OPEN_SECTION(limits, root, "limits", {"max_pending_per_user"});
  DGPU_CONFIG_RETURN_IF_ERROR(
      limits.ReadInt("max_pending_per_user", 1, 100'000'000, &c.limits.max_pending_per_user));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadAutoscale(root, &c.autoscale));

  DGPU_CONFIG_RETURN_IF_ERROR(ReadLogging(root, &c.logging, &c.audit_file));
  return c;
}

StatusOr<AgentConfig> ParseAgentDocument(const YAML::Node& document) {
  AgentConfig c;
  auto root_or = Section::Open(document, "",
                               {"agent", "scheduler", "resources", "gpu", "executor", "logging"});
  if (!root_or.ok()) return root_or.status();
  const Section& root = *root_or;

  DGPU_OPEN_SECTION(agent, root, "agent",
                    {"id", "heartbeat_interval", "stop_tasks_after_disconnect", "node_group",
                     "advertise_address", "labels"});
  DGPU_CONFIG_RETURN_IF_ERROR(agent.ReadString("id", &c.agent.id));
  if (!c.agent.id.empty()) {
    if (Status id = CheckAgentId(c.agent.id); !id.ok()) return Invalid("agent.id", id.message());
  }
  DGPU_CONFIG_RETURN_IF_ERROR(agent.ReadString("node_group", &c.agent.node_group));
  DGPU_CONFIG_RETURN_IF_ERROR(agent.ReadString("advertise_address", &c.agent.advertise_address));
  if (agent.Has("labels")) {
    const YAML::Node labels = agent.Get("labels");
    if (!labels.IsMap()) {
      return Invalid("agent.labels", "must be a mapping of label keys to values (rack: r1), got " +
                                         Describe(labels));
    }
    if (labels.size() > core::kMaxSelectorEntries) {
      return Invalid("agent.labels", "has " + std::to_string(labels.size()) +
                                         " labels; the limit is " +
                                         std::to_string(core::kMaxSelectorEntries));
    }
    for (const auto& entry : labels) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
      if (std::string why = core::CheckLabelKey(key); !why.empty()) {
        return Invalid("agent.labels", "key " + Quote(key) + " is not valid: " + why);
      }
      if (!entry.second.IsScalar()) {
        return Invalid("agent.labels." + key, "must be a string, got " + Describe(entry.second));
      }
      const std::string& value = entry.second.Scalar();
      if (std::string why = core::CheckLabelValue(value); !why.empty()) {
        return Invalid("agent.labels." + key, Quote(value) + " is not valid: " + why);
      }
      if (!c.agent.labels.emplace(key, value).second) {
        return Invalid("agent.labels", "key " + Quote(key) + " is given twice");
      }
    }
  }
  if (!c.agent.node_group.empty()) {
    DGPU_CONFIG_RETURN_IF_ERROR(CheckGroupName("agent.node_group", c.agent.node_group));
  }
  DGPU_CONFIG_RETURN_IF_ERROR(
      agent.ReadDuration("heartbeat_interval", &c.agent.heartbeat_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(agent.ReadDuration("stop_tasks_after_disconnect",
                                                 &c.agent.stop_tasks_after_disconnect,
                                                 DurationRule::kNonNegative));

  DGPU_OPEN_SECTION(scheduler, root, "scheduler",
                    {"master_address", "standby_address", "connection_timeout", "retry_interval",
                     "max_retry_interval", "tls"});
  SchedulerEndpointsConfig& s = c.scheduler;
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadAddress("master_address", &s.master_address, false));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadAddress("standby_address", &s.standby_address, true));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("connection_timeout", &s.connection_timeout));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("retry_interval", &s.retry_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(scheduler.ReadDuration("max_retry_interval", &s.max_retry_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadClientTls(scheduler, "tls", &s.tls));
  if (s.max_retry_interval < s.retry_interval) {
    return Invalid("scheduler.max_retry_interval", "must be at least scheduler.retry_interval (" +
                                                       FormatDuration(s.retry_interval) +
                                                       "), got " +
                                                       FormatDuration(s.max_retry_interval));
  }

  DGPU_OPEN_SECTION(resources, root, "resources",
                    {"cpus", "memory_mb", "reserved_cpus", "reserved_memory_mb"});
  NodeResourcesConfig& r = c.resources;
  DGPU_CONFIG_RETURN_IF_ERROR(resources.ReadCpus("cpus", true, &r.cpus_milli));
  DGPU_CONFIG_RETURN_IF_ERROR(resources.ReadCpus("reserved_cpus", false, &r.reserved_cpus_milli));
  if (resources.IsAuto("memory_mb")) {
    r.memory_mb = NodeResourcesConfig::kAuto;
  } else {
    DGPU_CONFIG_RETURN_IF_ERROR(resources.ReadInt("memory_mb", 1, int64_t{1} << 36, &r.memory_mb));
  }
  DGPU_CONFIG_RETURN_IF_ERROR(
      resources.ReadInt("reserved_memory_mb", 0, int64_t{1} << 36, &r.reserved_memory_mb));

  DGPU_OPEN_SECTION(gpu, root, "gpu",
                    {"detection_method", "health_check_interval", "health_check_program",
                     "nvidia_smi_path", "nvml_library", "fake"});
  GpuConfig& g = c.gpu;
  DGPU_CONFIG_RETURN_IF_ERROR(ReadDetectionMethods(gpu, &g.detection_method));
  DGPU_CONFIG_RETURN_IF_ERROR(gpu.ReadDuration("health_check_interval", &g.health_check_interval));
  DGPU_CONFIG_RETURN_IF_ERROR(gpu.ReadString("nvidia_smi_path", &g.nvidia_smi_path, false));
  DGPU_CONFIG_RETURN_IF_ERROR(gpu.ReadString("nvml_library", &g.nvml_library, false));
  DGPU_CONFIG_RETURN_IF_ERROR(gpu.ReadString("health_check_program", &g.health_check_program));
  DGPU_OPEN_SECTION(fake, gpu, "fake",
                    {"count", "model", "memory_mb", "fault_file", "device_dir", "nvlink_groups"});
  DGPU_CONFIG_RETURN_IF_ERROR(fake.ReadString("fault_file", &g.fake.fault_file));
  DGPU_CONFIG_RETURN_IF_ERROR(fake.ReadString("device_dir", &g.fake.device_dir));
  DGPU_CONFIG_RETURN_IF_ERROR(fake.ReadInt("count", 0, 1024, &g.fake.count));
  DGPU_CONFIG_RETURN_IF_ERROR(fake.ReadString("model", &g.fake.model, false));
  DGPU_CONFIG_RETURN_IF_ERROR(fake.ReadInt("memory_mb", 1, int64_t{1} << 40, &g.fake.memory_mb));
  DGPU_CONFIG_RETURN_IF_ERROR(ReadLinkGroups(fake, g.fake.count, &g.fake.nvlink_groups));

  DGPU_OPEN_SECTION(executor, root, "executor",
                    {"execution_method", "work_dir", "kill_grace_period", "keep_tasks_on_exit",
                     "docker", "run_as", "allow_root", "max_log_bytes", "retention", "run_dir",
                     "isolation", "cpu_binding", "max_pids_per_task"});
  ExecutorConfig& e = c.executor;
  DGPU_CONFIG_RETURN_IF_ERROR(
      executor.ReadEnum("execution_method", kExecutionMethods, &e.execution_method));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadString("work_dir", &e.work_dir, false));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadString("run_dir", &e.run_dir));
  DGPU_CONFIG_RETURN_IF_ERROR(
      executor.ReadDuration("kill_grace_period", &e.kill_grace_period, DurationRule::kNonNegative));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadBool("keep_tasks_on_exit", &e.keep_tasks_on_exit));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadEnum("run_as", kRunAs, &e.run_as));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadBool("allow_root", &e.allow_root));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadByteSize("max_log_bytes", &e.max_log_bytes));
  DGPU_CONFIG_RETURN_IF_ERROR(
      executor.ReadDuration("retention", &e.retention, DurationRule::kNonNegative));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadEnum("isolation", kIsolations, &e.isolation));
  DGPU_CONFIG_RETURN_IF_ERROR(executor.ReadEnum("cpu_binding", kCpuBindings, &e.cpu_binding));
  DGPU_CONFIG_RETURN_IF_ERROR(
      executor.ReadInt("max_pids_per_task", 0, int64_t{1} << 22, &e.max_pids_per_task));
  DGPU_OPEN_SECTION(docker, executor, "docker", {"socket", "default_image", "binary"});
  DGPU_CONFIG_RETURN_IF_ERROR(docker.ReadString("socket", &e.docker.socket, false));
  DGPU_CONFIG_RETURN_IF_ERROR(docker.ReadString("default_image", &e.docker.default_image, false));
  DGPU_CONFIG_RETURN_IF_ERROR(docker.ReadString("binary", &e.docker.binary, false));

  DGPU_CONFIG_RETURN_IF_ERROR(ReadLogging(root, &c.logging));
  return c;
}

#undef DGPU_OPEN_SECTION

// Parses `yaml` and hands the document to `parse`, converting every exception into a Status.
template <typename Config, typename Parse>
StatusOr<Config> ParseYaml(std::string_view yaml, Parse parse) {
  try {
    const YAML::Node document = YAML::Load(std::string(yaml));
    return parse(document);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return InvalidArgument("invalid YAML: " + e.msg);
    return InvalidArgument("invalid YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const std::exception& e) {
    return Internal(std::string("reading the configuration failed: ") + e.what());
  }
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    std::string message = path + ": cannot open: " + std::strerror(error);
    if (error == ENOENT) return NotFound(std::move(message));
    if (error == EACCES) return PermissionDenied(std::move(message));
    return InvalidArgument(std::move(message));
  }
  std::string contents;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) contents.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) return InvalidArgument(path + ": cannot read: " + std::strerror(error));
  return contents;
}

template <typename Config>
StatusOr<Config> LoadFromFile(const std::string& path,
                              StatusOr<Config> (*from_string)(std::string_view)) {
  StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  StatusOr<Config> config = from_string(*contents);
  if (!config.ok()) {
    return Status(config.status().code(), path + ": " + config.status().message());
  }
  return config;
}

}  // namespace

StatusOr<SchedulerConfig> LoadSchedulerConfigFromString(std::string_view yaml) {
  return ParseYaml<SchedulerConfig>(yaml, ParseSchedulerDocument);
}

StatusOr<std::string> ReadConfiguredFile(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(key + ": cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

namespace {

// Resolves the paths of one configuration against `base`, collecting the keys it changed.
class PathResolver {
 public:
  explicit PathResolver(const std::string& base) : base_(base) {}
  // A file or a directory.
  void Path(const std::string& key, std::string* path) {
    if (path->empty() || path->front() == '/') return;
    *path = (base_ / *path).lexically_normal().string();
    changed_.push_back(key);
  }
  // A program or a library: a bare name is left to PATH (or to the dynamic loader).
  void Program(const std::string& key, std::string* path) {
    if (path->find('/') != std::string::npos) Path(key, path);
  }
  void Tls(const std::string& key, ClientTlsConfig* tls) {
    Path(key + ".ca_file", &tls->ca_file);
    Path(key + ".cert_file", &tls->cert_file);
    Path(key + ".key_file", &tls->key_file);
  }
  void Logging(LoggingConfig* logging) {
    if (logging->output != "stdout" && logging->output != "stderr") {
      Path("logging.output", &logging->output);
    }
  }
  std::vector<std::string> changed() && { return std::move(changed_); }

 private:
  std::filesystem::path base_;
  std::vector<std::string> changed_;
};

std::string WorkingDirectory() {
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  return ec ? std::string("/") : cwd.string();
}

}  // namespace

std::vector<std::string> ResolveRelativePaths(SchedulerConfig* c, const std::string& base) {
  PathResolver r(base);
  r.Path("server.tls.cert_file", &c->server.tls.cert_file);
  r.Path("server.tls.key_file", &c->server.tls.key_file);
  r.Path("server.tls.client_ca_file", &c->server.tls.client_ca_file);
  r.Tls("replication.tls", &c->replication.tls);
  r.Tls("ha.etcd_tls", &c->ha.etcd_tls);
  r.Path("auth.tokens_file", &c->auth.tokens_file);
  r.Path("auth.jwt.hs256_secret_file", &c->auth.jwt.hs256_secret_file);
  r.Path("auth.jwt.rs256_public_key_file", &c->auth.jwt.rs256_public_key_file);
  r.Path("storage.snapshot_dir", &c->storage.snapshot_dir);
  r.Path("storage.shared_storage", &c->storage.shared_storage);
  r.Path("logging.audit_file", &c->audit_file);
  r.Logging(&c->logging);
  return std::move(r).changed();
}

std::vector<std::string> ResolveRelativePaths(AgentConfig* c, const std::string& base) {
  PathResolver r(base);
  r.Tls("scheduler.tls", &c->scheduler.tls);
  r.Program("gpu.nvidia_smi_path", &c->gpu.nvidia_smi_path);
  r.Program("gpu.nvml_library", &c->gpu.nvml_library);
  r.Program("gpu.health_check_program", &c->gpu.health_check_program);
  r.Path("gpu.fake.fault_file", &c->gpu.fake.fault_file);
  r.Path("gpu.fake.device_dir", &c->gpu.fake.device_dir);
  r.Path("executor.work_dir", &c->executor.work_dir);
  r.Path("executor.run_dir", &c->executor.run_dir);
  r.Path("executor.docker.socket", &c->executor.docker.socket);
  r.Program("executor.docker.binary", &c->executor.docker.binary);
  r.Logging(&c->logging);
  return std::move(r).changed();
}

StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::string& path) {
  StatusOr<SchedulerConfig> config =
      LoadFromFile<SchedulerConfig>(path, &LoadSchedulerConfigFromString);
  if (config.ok()) ResolveRelativePaths(&*config, WorkingDirectory());
  return config;
}

StatusOr<AgentConfig> LoadAgentConfigFromString(std::string_view yaml) {
  return ParseYaml<AgentConfig>(yaml, ParseAgentDocument);
}

StatusOr<AgentConfig> LoadAgentConfig(const std::string& path) {
  StatusOr<AgentConfig> config = LoadFromFile<AgentConfig>(path, &LoadAgentConfigFromString);
  if (config.ok()) ResolveRelativePaths(&*config, WorkingDirectory());
  return config;
}

std::optional<HostPort> ParseHostPort(std::string_view address) {
  HostPort result;
  std::string_view port_text;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return std::nullopt;
    }
    result.host = std::string(address.substr(1, close - 1));
    if (result.host.empty()) return std::nullopt;
    port_text = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    result.host = std::string(address.substr(0, colon));
    if (result.host.find(':') != std::string::npos) return std::nullopt;
    port_text = address.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5) return std::nullopt;
  unsigned port = 0;
  const char* end = port_text.data() + port_text.size();
  const auto parsed = std::from_chars(port_text.data(), end, port);
  if (parsed.ec != std::errc() || parsed.ptr != end || port > 65535) return std::nullopt;
  result.port = static_cast<uint16_t>(port);
  return result;
}

std::string ToBindAddress(std::string_view address) {
  if (address.starts_with(':')) return "0.0.0.0" + std::string(address);
  return std::string(address);
}

std::string ToConnectAddress(std::string_view address) {
  if (address.starts_with(':')) return "127.0.0.1" + std::string(address);
  if (address.starts_with("0.0.0.0:")) return "127.0.0.1" + std::string(address.substr(7));
  if (address.starts_with("[::]:")) return "[::1]" + std::string(address.substr(4));
  return std::string(address);
}

std::string IdOrHostname(std::string_view configured_id) {
  if (!configured_id.empty()) return std::string(configured_id);
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  return "localhost";
}

Status CheckAgentId(std::string_view id) {
  const auto allowed = [](char ch, bool first) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
           (!first && (ch == '.' || ch == '_' || ch == '-'));
  };
  bool ok = !id.empty() && id.size() <= 63;
  for (size_t i = 0; ok && i < id.size(); ++i) ok = allowed(id[i], i == 0);
  if (ok) return OkStatus();
  return InvalidArgument(
      "an agent id is 1 to 63 letters, digits, '.', '_' and '-', starting with a letter or a "
      "digit ([A-Za-z0-9][A-Za-z0-9._-]{0,62}), got " +
      Quote(id));
}

std::string_view ToString(LogLevel value) { return NameOf(kLogLevels, value); }
std::string_view ToString(LogFormat value) { return NameOf(kLogFormats, value); }
std::string_view ToString(SchedulerRole value) { return NameOf(kRoles, value); }
std::string_view ToString(ReplicationMode value) { return NameOf(kReplicationModes, value); }
std::string_view ToString(ElectionMethod value) { return NameOf(kElectionMethods, value); }
std::string_view ToString(AuthMode value) { return NameOf(kAuthModes, value); }

// Exact names only: a role is a permission, spelled one way everywhere.
constexpr EnumName<Role> kAccessRoles[] = {{"viewer", Role::kViewer},
                                           {"user", Role::kUser},
                                           {"operator", Role::kOperator},
                                           {"admin", Role::kAdmin}};

std::optional<Role> ParseRole(std::string_view name) {
  for (const auto& entry : kAccessRoles) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

std::string_view ToString(Role value) { return NameOf(kAccessRoles, value); }
std::string_view ToString(GpuDetectionMethod value) { return NameOf(kDetectionMethods, value); }
std::string_view ToString(ExecutionMethod value) { return NameOf(kExecutionMethods, value); }
std::string_view ToString(RunAs value) { return NameOf(kRunAs, value); }
std::string_view ToString(Isolation value) { return NameOf(kIsolations, value); }
std::string_view ToString(CpuBinding value) { return NameOf(kCpuBindings, value); }

}  // namespace dgpu::common
