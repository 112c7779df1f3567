// Who a request comes from, and what that identity may do.
//
//   auth.mode none:  nobody authenticates; every caller acts as an admin, but only from a loopback
//                    peer unless auth.allow_insecure_remote is true ("protected mode").
//   auth.mode token: `Authorization: Bearer <token>`, looked up in auth.tokens_file, which holds
//                    only the tokens' SHA-256 (users: [{name, token_sha256, role, teams}]).
//   auth.mode jwt:   a JWT signed with HS256 or RS256, checked for issuer, audience, expiry and
//                    not-before (with auth.jwt.clock_skew); its claims name the user, role and
//                    teams. Verified tokens are cached until they expire.
//
// Roles, each with everything of the one before: viewer (reads), user (+ submit, cancel its own
// tasks), operator (+ cancel any task), admin (+ quota, teams, database snapshots).
//
// Agents and the standby use gRPC, which has no bearer tokens: a gRPC peer must be loopback
// unless auth.allow_insecure_remote is true, whatever the mode.
//
// Thread-safety: Authenticator is safe to use from every transport thread; Reload swaps the
// tokens table atomically.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "common/config.h"

namespace dgpu::scheduler {

using common::ParseRole;
using Role = common::Role;  // Named, parsed and printed with the configuration (common/config.h).

struct Identity {
  std::string user;  // Empty without authentication.
  Role role = Role::kAdmin;
  std::vector<std::string> teams;  // The teams it may submit to; empty: the default team only.
  bool authenticated = false;      // False under auth.mode none.
};

// True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104, in the forms RESTinio and gRPC give peers
// ("127.0.0.1", "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "[::ffff:127.0.0.1]:80", "unix:...").
bool IsLoopbackPeer(std::string_view peer);

// SHA-256 of `data` as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view data);

// base64url without padding (RFC 7515 section 2), the encoding of a JWT's three parts. Decode
// gives nullopt for anything else (padding included).
std::string Base64UrlEncode(std::string_view data);
std::optional<std::string> Base64UrlDecode(std::string_view text);

// The users of auth.tokens_file.
class TokenTable {
 public:
  struct User {
    std::string name;
    std::array<uint8_t, 32> token_sha256{};
    Role role = Role::kViewer;
    std::vector<std::string> teams;
  };
  // InvalidArgument naming the entry and field at fault (a duplicate name or token included).
  static StatusOr<std::shared_ptr<const TokenTable>> Parse(std::string_view yaml,
                                                           const std::string& where);
  static StatusOr<std::shared_ptr<const TokenTable>> Load(const std::string& path);

  // The user whose token this is, or nullptr. The token's hash is looked up, then compared in
  // constant time: how long it takes says nothing of any stored token.
  const User* Find(std::string_view token) const;
  size_t size() const { return users_.size(); }

 private:
  std::vector<User> users_;
  std::unordered_map<std::string, size_t> by_hash_;  // Raw 32-byte hash -> index in users_.
};

// Verifies JWTs (compact form) against one key, issuer and audience.
class JwtVerifier {
 public:
  // Reads the key file; InvalidArgument naming the file when it cannot be used.
  static StatusOr<std::unique_ptr<JwtVerifier>> Create(const common::JwtConfig& config);
  ~JwtVerifier();
  // The identity the token stands for, with its expiry (unix seconds); Unauthenticated with a
  // message that says what to fix (expired, wrong audience, bad signature...).
  struct Verified {
    Identity identity;
    int64_t expires_at = 0;
  };
  StatusOr<Verified> Verify(std::string_view token, int64_t now_unix_seconds) const;

 private:
  JwtVerifier() = default;
  common::JwtConfig cfg_;
  std::string hs256_secret_;
  struct Key;
  std::unique_ptr<Key> rs256_key_;
};

// Why a request is refused before it reaches a use case.
struct AuthRefusal {
  enum class Kind { kUnauthenticated, kInsecureRemote };
  Kind kind = Kind::kUnauthenticated;
  std::string message;
};

class Authenticator {
 public:
  // Loads the tokens file or the JWT key; the error names the config key and the file.
  static StatusOr<std::unique_ptr<Authenticator>> Create(const common::AuthConfig& config);

  // The identity behind a REST request: `authorization` is the Authorization header (empty when
  // absent), `peer` the remote address.
  std::variant<Identity, AuthRefusal> Authenticate(std::string_view authorization,
                                                   std::string_view peer) const;
  // A gRPC peer (agents, the standby): loopback, or any with auth.allow_insecure_remote.
  bool AdmitsGrpcPeer(std::string_view peer) const;
  // Reads the tokens file again (SIGHUP). On an error the table in use stays and the error is
  // returned.
  Status Reload();

  common::AuthMode mode() const { return cfg_.mode; }
  bool metrics_public() const { return cfg_.metrics_public; }
  size_t users() const;

 private:
  explicit Authenticator(common::AuthConfig config) : cfg_(std::move(config)) {}
  std::shared_ptr<const TokenTable> tokens() const;
  std::variant<Identity, AuthRefusal> VerifyJwt(const std::string& token) const;

  common::AuthConfig cfg_;
  mutable std::mutex mu_;
  std::shared_ptr<const TokenTable> tokens_;  // Guarded by mu_ (the pointer; the table is const).
  std::unique_ptr<JwtVerifier> jwt_;
  // Verified JWTs until they expire; cleared when full.
  struct Cached {
    Identity identity;
    int64_t expires_at = 0;
  };
  mutable std::unordered_map<std::string, Cached> jwt_cache_;  // Guarded by mu_.
};

}  // namespace dgpu::scheduler
