#include "scheduler/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/time_util.h"
#include "core/types.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

constexpr size_t kMaxJwtCache = 10000;
constexpr size_t kMaxTokenBytes = 8192;

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// User names: what a Unix account or an e-mail-like subject can be, nothing that could be read as
// something else in a log line or a path.
bool IsValidUserName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (!(std::isalnum(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
           c == '@';
  });
}

std::optional<std::array<uint8_t, 32>> ParseHex32(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  std::array<uint8_t, 32> out{};
  for (size_t i = 0; i < 32; ++i) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string FormatUnix(int64_t seconds) { return common::FormatRfc3339(seconds * 1'000'000); }

}  // namespace

bool IsLoopbackPeer(std::string_view peer) {
  if (peer.starts_with("unix:")) return true;  // A local socket.
  if (peer.starts_with("ipv4:")) peer.remove_prefix(5);
  if (peer.starts_with("ipv6:")) peer.remove_prefix(5);
  if (peer.starts_with("[")) {  // [addr]:port or [addr]
    const size_t close = peer.find(']');
    if (close == std::string_view::npos) return false;
    peer = peer.substr(1, close - 1);
  } else if (std::count(peer.begin(), peer.end(), ':') == 1) {
    peer = peer.substr(0, peer.find(':'));  // a.b.c.d:port
  }
  if (peer == "::1" || peer == "0:0:0:0:0:0:0:1") return true;
  for (std::string_view mapped : {"::ffff:", "::FFFF:"}) {
    if (peer.starts_with(mapped)) peer.remove_prefix(mapped.size());
  }
  return peer.starts_with("127.") && std::count(peer.begin(), peer.end(), '.') == 3;
}

std::string Sha256Hex(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : Sha256(data)) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Base64UrlEncode(std::string_view data) {
  static constexpr char kChars[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((data.size() * 4 + 2) / 3);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : data) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kChars[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kChars[(acc << (6 - bits)) & 63]);
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '-') {
      v = 62;
    } else if (c == '_') {
      v = 63;
    } else {
      return std::nullopt;
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return std::nullopt;  // A length of 4n + 1 characters is not base64.
  return out;
}

// --- Tokens ------------------------------------------------------------------------------------

StatusOr<std::shared_ptr<const TokenTable>> TokenTable::Parse(std::string_view yaml,
                                                              const std::string& where) {
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(where + ": not valid YAML: " + e.what());
  }
  auto table = std::make_shared<TokenTable>();
  if (!doc.IsMap()) return InvalidArgument(where + ": must be a map with a \"users\" list");
  for (const auto& kv : doc) {
    if (kv.first.Scalar() != "users") {
      return InvalidArgument(where + ": unknown key " + Quote(kv.first.Scalar()) +
                             " (the file holds \"users\")");
    }
  }
  const YAML::Node users = doc["users"];
  if (!users.IsDefined() || users.IsNull())
    return std::shared_ptr<const TokenTable>(table);  // Nobody may log in.
  if (!users.IsSequence()) return InvalidArgument(where + ": users must be a list");
  for (size_t i = 0; i < users.size(); ++i) {
    const YAML::Node u = users[i];
    const std::string at = where + ": users[" + std::to_string(i) + "]";
    if (!u.IsMap()) return InvalidArgument(at + " must be a map");
    User user;
    for (const auto& kv : u) {
      const std::string key = kv.first.Scalar();
      if (key != "name" && key != "token_sha256" && key != "role" && key != "teams") {
        return InvalidArgument(at + ": unknown key " + Quote(key) +
                               " (name, token_sha256, role, teams)");
      }
    }
    auto scalar = [&](const char* key) -> std::optional<std::string> {
      const YAML::Node n = u[key];
      if (!n.IsDefined() || n.IsNull() || !n.IsScalar()) return std::nullopt;
      return n.Scalar();
    };
    auto name = scalar("name");
    if (!name || !IsValidUserName(*name)) {
      return InvalidArgument(at +
                             ".name: must be a user name (letters, digits, _ . - @; at most "
                             "64), got " +
                             (name ? Quote(*name) : "nothing"));
    }
    user.name = *name;
    const std::string named = where + ": user " + Quote(user.name);
    auto hash_text = scalar("token_sha256");
    std::optional<std::array<uint8_t, 32>> hash;
    if (hash_text) hash = ParseHex32(*hash_text);
    if (!hash) {
      return InvalidArgument(named +
                             ": token_sha256 must be 64 hex digits (sha256sum of the token), "
                             "got " +
                             (hash_text ? Quote(*hash_text) : "nothing"));
    }
    user.token_sha256 = *hash;
    auto role_text = scalar("role");
    auto role = role_text ? ParseRole(*role_text) : std::nullopt;
    if (!role) {
      return InvalidArgument(named + ": role must be one of viewer, user, operator, admin; got " +
                             (role_text ? Quote(*role_text) : "nothing"));
    }
    user.role = *role;
    if (const YAML::Node teams = u["teams"]; teams.IsDefined() && !teams.IsNull()) {
      if (!teams.IsSequence()) return InvalidArgument(named + ": teams must be a list of names");
      for (const auto& t : teams) {
        if (!t.IsScalar() || !core::IsValidTeamName(t.Scalar())) {
          return InvalidArgument(
              named + ": teams: " + (t.IsScalar() ? Quote(t.Scalar()) : std::string("an entry")) +
              " is not a team name ([a-z0-9][a-z0-9_-]{0,62})");
        }
        user.teams.push_back(t.Scalar());
      }
    }
    for (const User& other : table->users_) {
      if (other.name == user.name) return InvalidArgument(named + ": listed twice");
      if (other.token_sha256 == user.token_sha256) {
        return InvalidArgument(named + ": has the same token as user " + Quote(other.name));
      }
    }
    table->by_hash_.emplace(std::string(user.token_sha256.begin(), user.token_sha256.end()),
                            table->users_.size());
    table->users_.push_back(std::move(user));
  }
  return std::shared_ptr<const TokenTable>(std::move(table));
}

StatusOr<std::shared_ptr<const TokenTable>> TokenTable::Load(const std::string& path) {
  auto text = common::ReadConfiguredFile("auth.tokens_file", path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

const TokenTable::User* TokenTable::Find(std::string_view token) const {
  const std::array<uint8_t, 32> hash = Sha256(token);
  auto it = by_hash_.find(std::string(hash.begin(), hash.end()));
  if (it == by_hash_.end()) return nullptr;
  const User& user = users_[it->second];
  if (CRYPTO_memcmp(user.token_sha256.data(), hash.data(), hash.size()) != 0) return nullptr;
  return &user;
}

// --- JWT ---------------------------------------------------------------------------------------

struct JwtVerifier::Key {
  EVP_PKEY* pkey = nullptr;
  ~Key() { EVP_PKEY_free(pkey); }
};

JwtVerifier::~JwtVerifier() = default;

StatusOr<std::unique_ptr<JwtVerifier>> JwtVerifier::Create(const common::JwtConfig& config) {
  std::unique_ptr<JwtVerifier> v(new JwtVerifier());
  v->cfg_ = config;
  if (!config.hs256_secret_file.empty()) {
    auto secret =
        common::ReadConfiguredFile("auth.jwt.hs256_secret_file", config.hs256_secret_file);
    if (!secret.ok()) return secret.status();
    // A trailing newline (echo > file) is not part of the secret.
    while (!secret->empty() && (secret->back() == '\n' || secret->back() == '\r')) {
      secret->pop_back();
    }
    if (secret->size() < 32) {
      return InvalidArgument("auth.jwt.hs256_secret_file: " + config.hs256_secret_file + " holds " +
                             std::to_string(secret->size()) +
                             " bytes; an HS256 secret needs at least 32");
    }
    v->hs256_secret_ = std::move(*secret);
    return v;
  }
  auto pem =
      common::ReadConfiguredFile("auth.jwt.rs256_public_key_file", config.rs256_public_key_file);
  if (!pem.ok()) return pem.status();
  BIO* bio = BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  EVP_PKEY* pkey = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (pkey == nullptr || EVP_PKEY_base_id(pkey) != EVP_PKEY_RSA) {
    EVP_PKEY_free(pkey);
    return InvalidArgument("auth.jwt.rs256_public_key_file: " + config.rs256_public_key_file +
                           " is not a PEM RSA public key (-----BEGIN PUBLIC KEY-----)");
  }
  v->rs256_key_ = std::make_unique<Key>();
  v->rs256_key_->pkey = pkey;
  return v;
}

StatusOr<JwtVerifier::Verified> JwtVerifier::Verify(std::string_view token,
                                                    int64_t now_unix_seconds) const {
  const size_t dot1 = token.find('.');
  const size_t dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos) {
    return Unauthenticated("the bearer token is not a JWT (header.payload.signature)");
  }
  auto header_text = Base64UrlDecode(token.substr(0, dot1));
  auto payload_text = Base64UrlDecode(token.substr(dot1 + 1, dot2 - dot1 - 1));
  auto signature = Base64UrlDecode(token.substr(dot2 + 1));
  if (!header_text || !payload_text || !signature) {
    return Unauthenticated("the JWT is not base64url-encoded");
  }
  const json header = json::parse(*header_text, nullptr, false);
  const json claims = json::parse(*payload_text, nullptr, false);
  if (!header.is_object() || !claims.is_object()) {
    return Unauthenticated("the JWT's header or claims are not a JSON object");
  }
  const std::string expected_alg = rs256_key_ ? "RS256" : "HS256";
  const auto alg = header.find("alg");
  if (alg == header.end() || !alg->is_string() || *alg != expected_alg) {
    return Unauthenticated("the JWT is signed with " +
                           (alg != header.end() && alg->is_string() ? alg->get<std::string>()
                                                                    : std::string("no algorithm")) +
                           "; this scheduler accepts " + expected_alg + " only");
  }
  const std::string_view signed_part = token.substr(0, dot2);
  bool good = false;
  if (rs256_key_) {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    good = ctx != nullptr &&
           EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, rs256_key_->pkey) == 1 &&
           EVP_DigestVerify(
               ctx, reinterpret_cast<const unsigned char*>(signature->data()), signature->size(),
               reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size()) == 1;
    EVP_MD_CTX_free(ctx);
  } else {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), hs256_secret_.data(), static_cast<int>(hs256_secret_.size()),
         reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size(), mac,
         &mac_len);
    good = signature->size() == mac_len && CRYPTO_memcmp(mac, signature->data(), mac_len) == 0;
  }
  if (!good) {
    return Unauthenticated("the JWT's signature does not verify with the configured " +
                           expected_alg + " key");
  }
  const int64_t skew = cfg_.clock_skew.count() / 1000;
  auto number = [&](const char* name) -> std::optional<int64_t> {
    auto it = claims.find(name);
    if (it == claims.end() || !it->is_number()) return std::nullopt;
    return static_cast<int64_t>(it->get<double>());
  };
  const auto exp = number("exp");
  if (!exp) return Unauthenticated("the JWT has no numeric \"exp\" claim; tokens must expire");
  if (now_unix_seconds > *exp + skew) {
    return Unauthenticated("the JWT expired at " + FormatUnix(*exp) + " (" +
                           std::to_string(now_unix_seconds - *exp) + " s ago); get a new token");
  }
  if (const auto nbf = number("nbf"); nbf && now_unix_seconds + skew < *nbf) {
    return Unauthenticated("the JWT is not valid before " + FormatUnix(*nbf));
  }
  const auto iss = claims.find("iss");
  if (iss == claims.end() || !iss->is_string() || *iss != cfg_.issuer) {
    return Unauthenticated("the JWT's issuer is " +
                           (iss != claims.end() && iss->is_string() ? Quote(iss->get<std::string>())
                                                                    : std::string("missing")) +
                           "; this scheduler accepts " + Quote(cfg_.issuer));
  }
  bool audience_ok = false;
  if (const auto aud = claims.find("aud"); aud != claims.end()) {
    if (aud->is_string()) audience_ok = *aud == cfg_.audience;
    if (aud->is_array()) {
      audience_ok = std::any_of(aud->begin(), aud->end(),
                                [&](const json& a) { return a.is_string() && a == cfg_.audience; });
    }
  }
  if (!audience_ok) {
    const auto aud = claims.find("aud");
    return Unauthenticated("the JWT's audience is " +
                           (aud == claims.end() ? std::string("missing") : aud->dump()) +
                           "; this scheduler's audience is " + Quote(cfg_.audience));
  }
  Verified v;
  v.expires_at = *exp;
  v.identity.authenticated = true;
  const auto user = claims.find(cfg_.user_claim);
  if (user == claims.end() || !user->is_string() || !IsValidUserName(user->get<std::string>())) {
    return Unauthenticated("the JWT's " + Quote(cfg_.user_claim) +
                           " claim must name the user (letters, digits, _ . - @; at most 64)");
  }
  v.identity.user = user->get<std::string>();
  std::string role_name = cfg_.default_role;
  if (const auto role = claims.find(cfg_.role_claim); role != claims.end()) {
    if (!role->is_string()) {
      return Unauthenticated("the JWT's " + Quote(cfg_.role_claim) + " claim must be a string");
    }
    role_name = role->get<std::string>();
  }
  auto role = ParseRole(role_name);
  if (!role) {
    return Unauthenticated("the JWT's role " + Quote(role_name) +
                           " is not one of viewer, user, operator, admin");
  }
  v.identity.role = *role;
  if (const auto teams = claims.find(cfg_.teams_claim); teams != claims.end()) {
    const json list = teams->is_string() ? json::array({*teams}) : *teams;
    if (!list.is_array()) {
      return Unauthenticated("the JWT's " + Quote(cfg_.teams_claim) +
                             " claim must be a team name or a list of them");
    }
    for (const auto& t : list) {
      if (!t.is_string() || !core::IsValidTeamName(t.get<std::string>())) {
        return Unauthenticated("the JWT's " + Quote(cfg_.teams_claim) + " claim holds " + t.dump() +
                               ", which is not a team name");
      }
      v.identity.teams.push_back(t.get<std::string>());
    }
  }
  return v;
}

// --- Authenticator -----------------------------------------------------------------------------

StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(const common::AuthConfig& config) {
  std::unique_ptr<Authenticator> a(new Authenticator(config));
  if (config.mode == common::AuthMode::kToken) {
    auto table = TokenTable::Load(config.tokens_file);
    if (!table.ok()) return table.status();
    a->tokens_ = std::move(*table);
  } else if (config.mode == common::AuthMode::kJwt) {
    auto jwt = JwtVerifier::Create(config.jwt);
    if (!jwt.ok()) return jwt.status();
    a->jwt_ = std::move(*jwt);
  }
  return a;
}

std::shared_ptr<const TokenTable> Authenticator::tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_;
}

size_t Authenticator::users() const {
  auto t = tokens();
  return t ? t->size() : 0;
}

Status Authenticator::Reload() {
  if (cfg_.mode != common::AuthMode::kToken) return OkStatus();
  auto table = TokenTable::Load(cfg_.tokens_file);
  if (!table.ok()) return table.status();
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(*table);
  return OkStatus();
}

bool Authenticator::AdmitsGrpcPeer(std::string_view peer) const {
  return cfg_.allow_insecure_remote || IsLoopbackPeer(peer);
}

std::variant<Identity, AuthRefusal> Authenticator::Authenticate(std::string_view authorization,
                                                                std::string_view peer) const {
  using Kind = AuthRefusal::Kind;
  if (cfg_.mode == common::AuthMode::kNone) {
    if (cfg_.allow_insecure_remote || IsLoopbackPeer(peer)) return Identity{};
    return AuthRefusal{Kind::kInsecureRemote,
                       "this scheduler runs without authentication (auth.mode: none) and answers "
                       "loopback clients only; turn on auth.mode token or jwt, or set "
                       "auth.allow_insecure_remote: true"};
  }
  if (authorization.empty()) {
    return AuthRefusal{Kind::kUnauthenticated,
                       "this scheduler requires a bearer token (Authorization: Bearer <token>)"};
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), authorization.begin(),
                  [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
    return AuthRefusal{Kind::kUnauthenticated,
                       "the Authorization header must be \"Bearer <token>\""};
  }
  std::string_view token = authorization.substr(kBearer.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.size() > kMaxTokenBytes) {
    return AuthRefusal{Kind::kUnauthenticated, "the bearer token is empty or too long"};
  }
  if (cfg_.mode == common::AuthMode::kToken) {
    auto table = tokens();
    const TokenTable::User* u = table ? table->Find(token) : nullptr;
    if (u == nullptr) {
      return AuthRefusal{Kind::kUnauthenticated,
                         "the bearer token is not known to this scheduler (auth.tokens_file)"};
    }
    return Identity{u->name, u->role, u->teams, true};
  }
  return VerifyJwt(std::string(token));
}

std::variant<Identity, AuthRefusal> Authenticator::VerifyJwt(const std::string& token) const {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const int64_t skew = cfg_.jwt.clock_skew.count() / 1000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jwt_cache_.find(token);
    if (it != jwt_cache_.end()) {
      if (now <= it->second.expires_at + skew) return it->second.identity;
      jwt_cache_.erase(it);
    }
  }
  auto verified = jwt_->Verify(token, now);
  if (!verified.ok()) {
    return AuthRefusal{AuthRefusal::Kind::kUnauthenticated, verified.status().message()};
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (jwt_cache_.size() >= kMaxJwtCache) jwt_cache_.clear();
  jwt_cache_[token] = {verified->identity, verified->expires_at};
  return verified->identity;
}

}  // namespace dgpu::scheduler
