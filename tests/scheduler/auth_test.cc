// Tokens, JWTs, peers and roles: who a request comes from and what it may do.
#include "scheduler/auth.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "scheduler/application.h"
#include "scheduler/audit_log.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dgpu-auth-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// --- Peers -------------------------------------------------------------------------------------

TEST(LoopbackPeerTest, RecognisesEveryFormTransportsGive) {
  for (const char* p : {"127.0.0.1", "127.0.0.1:5000", "127.1.2.3:80", "ipv4:127.0.0.1:5000",
                        "ipv6:[::1]:5000", "[::1]:80", "::1", "[::ffff:127.0.0.1]:80",
                        "ipv6:[::ffff:127.0.0.1]:9", "unix:/tmp/socket"}) {
    EXPECT_TRUE(IsLoopbackPeer(p)) << p;
  }
  for (const char* p :
       {"10.0.0.1:5000", "ipv4:192.0.2.2:41000", "ipv6:[2001:db8::1]:80", "[::ffff:10.1.2.3]:80",
        "128.0.0.1:1", "127.0.0:1", "", "localhost:80", "ipv4:127.0.0.1.evil:1"}) {
    EXPECT_FALSE(IsLoopbackPeer(p)) << p;
  }
}

TEST(Base64UrlTest, Rfc4648VectorsWithoutPadding) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""},           {"f", "Zg"},          {"fo", "Zm8"},          {"foo", "Zm9v"},
      {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64UrlEncode(plain), encoded);
    EXPECT_EQ(Base64UrlDecode(encoded), plain) << encoded;
  }
  for (const char* bad : {"Zg==", "Z", "Zm9vY", "Zm+v", "Zm/v", "Zm v"}) {
    EXPECT_EQ(Base64UrlDecode(bad), std::nullopt) << bad;
  }
}

// --- Tokens file -------------------------------------------------------------------------------

const std::string kAliceToken = "alice-secret-token-0123456789";
const std::string kBobToken = "bob-secret-token-9876543210";

std::string TokensYaml() {
  return "users:\n"
         "  - {name: alice, token_sha256: " +
         Sha256Hex(kAliceToken) +
         ", role: user, teams: [nlp, vision]}\n"
         "  - {name: bob, token_sha256: " +
         Sha256Hex(kBobToken) + ", role: admin}\n";
}

TEST(TokenTableTest, FindsUsersByTokenAndNothingElse) {
  auto table = TokenTable::Parse(TokensYaml(), "tokens.yaml");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ((*table)->size(), 2u);
  const TokenTable::User* alice = (*table)->Find(kAliceToken);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(alice->teams, (std::vector<std::string>{"nlp", "vision"}));
  EXPECT_EQ((*table)->Find(kBobToken)->role, Role::kAdmin);
  EXPECT_EQ((*table)->Find(kAliceToken + "x"), nullptr);
  EXPECT_EQ((*table)->Find(""), nullptr);
  EXPECT_EQ((*table)->Find(Sha256Hex(kAliceToken)), nullptr);  // The hash is not the token.
}

TEST(TokenTableTest, Sha256HexMatchesSha256sum) {
  // printf 'abc' | sha256sum
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenTableTest, RefusesEachMistakeNamingIt) {
  const std::string h = Sha256Hex("t1"), h2 = Sha256Hex("t2");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"users: 3", "users must be a list"},
      {"people: []", "unknown key \"people\""},
      {"users:\n  - {token_sha256: " + h + ", role: user}", "users[0].name"},
      {"users:\n  - {name: 'a b', token_sha256: " + h + ", role: user}", "users[0].name"},
      {"users:\n  - {name: al, token_sha256: abc, role: user}",
       "user \"al\": token_sha256 must be 64 hex digits"},
      {"users:\n  - {name: al, token_sha256: " + h + ", role: root}",
       "user \"al\": role must be one of viewer, user, operator, admin; got \"root\""},
      {"users:\n  - {name: al, token_sha256: " + h + ", role: user, teams: [NLP]}",
       "\"NLP\" is not a team name"},
      {"users:\n  - {name: al, token_sha256: " + h + ", role: user, token: x}",
       "unknown key \"token\""},
      {"users:\n  - {name: al, token_sha256: " + h +
           ", role: user}\n  - {name: al, "
           "token_sha256: " +
           h2 + ", role: user}",
       "user \"al\": listed twice"},
      {"users:\n  - {name: al, token_sha256: " + h +
           ", role: user}\n  - {name: bo, "
           "token_sha256: " +
           h + ", role: user}",
       "user \"bo\": has the same token as user \"al\""},
      {"users: [", "not valid YAML"},
  };
  for (const auto& [yaml, expected] : cases) {
    auto table = TokenTable::Parse(yaml, "tokens.yaml");
    ASSERT_FALSE(table.ok()) << yaml;
    EXPECT_NE(table.status().message().find(expected), std::string::npos)
        << yaml << " -> " << table.status().message();
    EXPECT_EQ(table.status().message().rfind("tokens.yaml", 0), 0u) << table.status().message();
  }
}

// --- Authenticator -----------------------------------------------------------------------------

TEST(AuthenticatorTest, ModeNoneAnswersLoopbackOnly) {
  common::AuthConfig cfg;
  auto auth = Authenticator::Create(cfg);
  ASSERT_TRUE(auth.ok());
  auto local = (*auth)->Authenticate("", "127.0.0.1:4000");
  ASSERT_TRUE(std::holds_alternative<Identity>(local));
  EXPECT_FALSE(std::get<Identity>(local).authenticated);
  EXPECT_EQ(std::get<Identity>(local).role, Role::kAdmin);
  auto remote = (*auth)->Authenticate("Bearer whatever", "192.0.2.7:4000");
  ASSERT_TRUE(std::holds_alternative<AuthRefusal>(remote));
  EXPECT_EQ(std::get<AuthRefusal>(remote).kind, AuthRefusal::Kind::kInsecureRemote);
  EXPECT_NE(std::get<AuthRefusal>(remote).message.find("auth.allow_insecure_remote"),
            std::string::npos);
  EXPECT_TRUE((*auth)->AdmitsGrpcPeer("ipv4:127.0.0.1:1"));
  EXPECT_FALSE((*auth)->AdmitsGrpcPeer("ipv4:192.0.2.7:1"));

  cfg.allow_insecure_remote = true;
  auto open = Authenticator::Create(cfg);
  EXPECT_TRUE(std::holds_alternative<Identity>((*open)->Authenticate("", "192.0.2.7:4000")));
  EXPECT_TRUE((*open)->AdmitsGrpcPeer("ipv4:192.0.2.7:1"));
}

TEST(AuthenticatorTest, TokenModeChecksTheBearerAndReloads) {
  TempDir dir;
  common::AuthConfig cfg;
  cfg.mode = common::AuthMode::kToken;
  cfg.tokens_file = dir.Write("tokens.yaml", TokensYaml());
  auto created = Authenticator::Create(cfg);
  ASSERT_TRUE(created.ok()) << created.status().message();
  const Authenticator& auth = **created;

  auto alice = auth.Authenticate("Bearer " + kAliceToken, "192.0.2.7:1");
  ASSERT_TRUE(std::holds_alternative<Identity>(alice));
  EXPECT_EQ(std::get<Identity>(alice).user, "alice");
  EXPECT_TRUE(std::get<Identity>(alice).authenticated);
  EXPECT_TRUE(std::holds_alternative<Identity>(auth.Authenticate("bearer  " + kBobToken, "")));

  for (const std::string& header : std::vector<std::string>{
           "", "Bearer", "Bearer ", "Basic abc", "Bearer wrong-token", "Token " + kAliceToken}) {
    auto r = auth.Authenticate(header, "127.0.0.1:1");
    ASSERT_TRUE(std::holds_alternative<AuthRefusal>(r)) << header;
    EXPECT_EQ(std::get<AuthRefusal>(r).kind, AuthRefusal::Kind::kUnauthenticated) << header;
  }
  // Secrets are never in messages.
  auto wrong = auth.Authenticate("Bearer wrong-token", "127.0.0.1:1");
  EXPECT_EQ(std::get<AuthRefusal>(wrong).message.find("wrong-token"), std::string::npos);

  // A new file takes effect on Reload; a broken one leaves the old table in place.
  dir.Write("tokens.yaml", "users:\n  - {name: carol, token_sha256: " + Sha256Hex("carol-t") +
                               ", role: viewer}\n");
  ASSERT_TRUE(const_cast<Authenticator&>(auth).Reload().ok());
  EXPECT_EQ(auth.users(), 1u);
  EXPECT_TRUE(std::holds_alternative<AuthRefusal>(auth.Authenticate("Bearer " + kAliceToken, "")));
  EXPECT_TRUE(std::holds_alternative<Identity>(auth.Authenticate("Bearer carol-t", "")));
  dir.Write("tokens.yaml", "users: [");
  EXPECT_FALSE(const_cast<Authenticator&>(auth).Reload().ok());
  EXPECT_TRUE(std::holds_alternative<Identity>(auth.Authenticate("Bearer carol-t", "")));
}

TEST(AuthenticatorTest, MissingFilesAreNamedAtStart) {
  common::AuthConfig cfg;
  cfg.mode = common::AuthMode::kToken;
  cfg.tokens_file = "/nonexistent/tokens.yaml";
  auto a = Authenticator::Create(cfg);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("auth.tokens_file: cannot read /nonexistent/tokens.yaml"),
            std::string::npos)
      << a.status().message();
  cfg.mode = common::AuthMode::kJwt;
  cfg.jwt.hs256_secret_file = "/nonexistent/secret";
  a = Authenticator::Create(cfg);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("auth.jwt.hs256_secret_file"), std::string::npos);
}

// --- JWT ---------------------------------------------------------------------------------------

const std::string kSecret = "0123456789abcdef0123456789abcdef-secret";

std::string SignHs256(const json& header, const json& claims, const std::string& secret) {
  const std::string signing = Base64UrlEncode(header.dump()) + "." + Base64UrlEncode(claims.dump());
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(signing.data()), signing.size(), mac, &len);
  return signing + "." + Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), len));
}

json Claims(int64_t exp_offset = 3600) {
  return {{"iss", "https://idp.example"}, {"aud", "dgpu"},    {"sub", "alice"},
          {"role", "operator"},           {"teams", {"nlp"}}, {"exp", Now() + exp_offset}};
}

common::JwtConfig Hs256Config(const TempDir& dir) {
  common::JwtConfig cfg;
  cfg.issuer = "https://idp.example";
  cfg.audience = "dgpu";
  cfg.hs256_secret_file = dir.Write("secret", kSecret + "\n");
  return cfg;
}

TEST(JwtTest, Hs256TokenGivesItsIdentity) {
  TempDir dir;
  auto v = JwtVerifier::Create(Hs256Config(dir));
  ASSERT_TRUE(v.ok()) << v.status().message();
  auto r = (*v)->Verify(SignHs256({{"alg", "HS256"}, {"typ", "JWT"}}, Claims(), kSecret), Now());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->identity.user, "alice");
  EXPECT_EQ(r->identity.role, Role::kOperator);
  EXPECT_EQ(r->identity.teams, std::vector<std::string>{"nlp"});
  EXPECT_TRUE(r->identity.authenticated);

  json audiences = Claims();
  audiences["aud"] = {"other", "dgpu"};
  audiences.erase("role");
  audiences["teams"] = "vision";
  r = (*v)->Verify(SignHs256({{"alg", "HS256"}}, audiences, kSecret), Now());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->identity.role, Role::kUser);  // default_role
  EXPECT_EQ(r->identity.teams, std::vector<std::string>{"vision"});
}

TEST(JwtTest, EachBadTokenSaysWhatToFix) {
  TempDir dir;
  auto v = JwtVerifier::Create(Hs256Config(dir));
  ASSERT_TRUE(v.ok());
  const json hs = {{"alg", "HS256"}};
  auto claims_with = [](const char* key, json value) {
    json c = Claims();
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = std::move(value);
    }
    return c;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {SignHs256(hs, Claims(-3600), kSecret), "the JWT expired at"},
      {SignHs256(hs, claims_with("exp", nullptr), kSecret), "no numeric \"exp\""},
      {SignHs256(hs, claims_with("nbf", Now() + 3600), kSecret), "not valid before"},
      {SignHs256(hs, claims_with("aud", "another"), kSecret),
       "audience is \"another\"; this scheduler's audience is \"dgpu\""},
      {SignHs256(hs, claims_with("aud", nullptr), kSecret), "audience is missing"},
      {SignHs256(hs, claims_with("iss", "https://evil"), kSecret),
       "issuer is \"https://evil\"; this scheduler accepts \"https://idp.example\""},
      {SignHs256(hs, claims_with("sub", nullptr), kSecret), "\"sub\" claim must name the user"},
      {SignHs256(hs, claims_with("role", "root"), kSecret), "role \"root\" is not one of"},
      {SignHs256(hs, claims_with("teams", json::array({"Bad Team"})), kSecret),
       "which is not a team name"},
      {SignHs256(hs, Claims(), "another-secret-0123456789abcdef012345"),
       "signature does not verify"},
      {SignHs256({{"alg", "none"}}, Claims(), kSecret), "signed with none"},
      {SignHs256({{"alg", "RS256"}}, Claims(), kSecret), "signed with RS256"},
      {"a.b", "not a JWT"},
      {"a.b.c.d", "not a JWT"},
      {"a!.b.c", "not base64url"},
      {Base64UrlEncode("[]") + "." + Base64UrlEncode("{}") + ".AA", "not a JSON object"},
  };
  for (const auto& [token, expected] : cases) {
    auto r = (*v)->Verify(token, Now());
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_NE(r.status().message().find(expected), std::string::npos)
        << expected << " -> " << r.status().message();
  }
  // Within the clock skew (60 s by default) a just-expired token still passes.
  EXPECT_TRUE((*v)->Verify(SignHs256(hs, Claims(-30), kSecret), Now()).ok());
}

TEST(JwtTest, ShortSecretIsRefused) {
  TempDir dir;
  common::JwtConfig cfg = Hs256Config(dir);
  cfg.hs256_secret_file = dir.Write("short", "tooshort\n");
  auto v = JwtVerifier::Create(cfg);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("at least 32"), std::string::npos);
}

TEST(JwtTest, Rs256TokenVerifiesWithThePublicKeyOnly) {
  TempDir dir;
  EVP_PKEY* key = EVP_RSA_gen(2048);
  ASSERT_NE(key, nullptr);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key);
  char* pem_data = nullptr;
  const long pem_len = BIO_get_mem_data(bio, &pem_data);
  const std::string pem(pem_data, pem_len);
  BIO_free(bio);
  common::JwtConfig cfg;
  cfg.issuer = "https://idp.example";
  cfg.audience = "dgpu";
  cfg.rs256_public_key_file = dir.Write("key.pem", pem);
  auto v = JwtVerifier::Create(cfg);
  ASSERT_TRUE(v.ok()) << v.status().message();

  const std::string signing =
      Base64UrlEncode(json({{"alg", "RS256"}}).dump()) + "." + Base64UrlEncode(Claims().dump());
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t sig_len = 0;
  ASSERT_EQ(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key), 1);
  ASSERT_EQ(EVP_DigestSign(ctx, nullptr, &sig_len,
                           reinterpret_cast<const unsigned char*>(signing.data()), signing.size()),
            1);
  std::string sig(sig_len, '\0');
  ASSERT_EQ(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &sig_len,
                           reinterpret_cast<const unsigned char*>(signing.data()), signing.size()),
            1);
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  const std::string token = signing + "." + Base64UrlEncode(sig.substr(0, sig_len));
  auto r = (*v)->Verify(token, Now());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->identity.user, "alice");
  // The algorithm-confusion attack: an HS256 token "signed" with the public key as secret.
  auto confused = (*v)->Verify(SignHs256({{"alg", "HS256"}}, Claims(), pem), Now());
  ASSERT_FALSE(confused.ok());
  EXPECT_NE(confused.status().message().find("accepts RS256 only"), std::string::npos);
  // A flipped byte of the signature.
  std::string tampered = token;
  tampered[tampered.size() - 5] = tampered[tampered.size() - 5] == 'A' ? 'B' : 'A';
  EXPECT_FALSE((*v)->Verify(tampered, Now()).ok());
  // Not a key at all.
  cfg.rs256_public_key_file = dir.Write("junk.pem", "not a key");
  auto junk = JwtVerifier::Create(cfg);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("is not a PEM RSA public key"), std::string::npos);
}

TEST(AuthenticatorTest, JwtModeCachesVerifiedTokensUntilTheyExpire) {
  TempDir dir;
  common::AuthConfig cfg;
  cfg.mode = common::AuthMode::kJwt;
  cfg.jwt = Hs256Config(dir);
  cfg.jwt.clock_skew = std::chrono::milliseconds(0);
  auto auth = Authenticator::Create(cfg);
  ASSERT_TRUE(auth.ok()) << auth.status().message();
  const std::string token = SignHs256({{"alg", "HS256"}}, Claims(), kSecret);
  for (int i = 0; i < 3; ++i) {
    auto r = (*auth)->Authenticate("Bearer " + token, "192.0.2.1:1");
    ASSERT_TRUE(std::holds_alternative<Identity>(r));
    EXPECT_EQ(std::get<Identity>(r).user, "alice");
  }
  auto expired =
      (*auth)->Authenticate("Bearer " + SignHs256({{"alg", "HS256"}}, Claims(-1), kSecret), "");
  ASSERT_TRUE(std::holds_alternative<AuthRefusal>(expired));
  EXPECT_NE(std::get<AuthRefusal>(expired).message.find("expired"), std::string::npos);
}

// --- Roles -------------------------------------------------------------------------------------

Caller RestCaller(Role role, std::string user = "alice", std::vector<std::string> teams = {}) {
  Caller c;
  c.peer = "192.0.2.1:1";
  c.identity = Identity{std::move(user), role, std::move(teams), true};
  return c;
}

TEST(RoleAuthorizerTest, EachRoleMayDoWhatItsTableSays) {
  RoleAuthorizer authz;
  const std::vector<Action> actions = {
      Action::kReadTasks, Action::kReadCluster, Action::kSubmitTask,  Action::kCancelTask,
      Action::kSetQuota,  Action::kSetTeam,     Action::kTakeSnapshot};
  // Rows: viewer, user, operator, admin; columns: the actions above.
  const bool allowed[4][7] = {{true, true, false, false, false, false, false},
                              {true, true, true, true, false, false, false},
                              {true, true, true, true, false, false, false},
                              {true, true, true, true, true, true, true}};
  for (int r = 0; r < 4; ++r) {
    for (size_t a = 0; a < actions.size(); ++a) {
      Target target;
      target.user = "alice";
      target.team = "default";
      Status s = authz.Authorize(RestCaller(static_cast<Role>(r)), actions[a], target);
      EXPECT_EQ(s.ok(), allowed[r][a])
          << ToString(static_cast<Role>(r)) << " " << ToString(actions[a]) << ": " << s.message();
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
      }
    }
  }
  // Agents' actions are for gRPC callers only.
  EXPECT_FALSE(authz.Authorize(RestCaller(Role::kAdmin), Action::kRegisterNode, {}).ok());
  Caller agent{Caller::Transport::kGrpc, "ipv4:127.0.0.1:1", {}};
  EXPECT_TRUE(authz.Authorize(agent, Action::kRegisterNode, {}).ok());
  EXPECT_FALSE(authz.Authorize(agent, Action::kSubmitTask, {}).ok());
  // Without authentication (mode none) the transport already decided.
  Caller local{Caller::Transport::kRest, "127.0.0.1:1", {}};
  EXPECT_TRUE(authz.Authorize(local, Action::kSetQuota, {}).ok());
}

TEST(RoleAuthorizerTest, UsersSubmitAsThemselvesToTheirTeams) {
  RoleAuthorizer authz;
  auto submit = [&](const Caller& c, const std::string& user, const std::string& team) {
    Target t;
    t.user = user;
    t.team = team;
    return authz.Authorize(c, Action::kSubmitTask, t);
  };
  const Caller alice = RestCaller(Role::kUser, "alice", {"nlp", "vision"});
  EXPECT_TRUE(submit(alice, "alice", "nlp").ok());
  EXPECT_TRUE(submit(alice, "alice", "vision").ok());
  Status other_team = submit(alice, "alice", "speech");
  EXPECT_NE(other_team.message().find("may not submit to team \"speech\"; its teams: nlp, vision"),
            std::string::npos)
      << other_team.message();
  Status as_bob = submit(alice, "bob", "nlp");
  EXPECT_NE(as_bob.message().find("may not submit tasks as \"bob\""), std::string::npos);
  // No teams listed: the default team only.
  const Caller dave = RestCaller(Role::kUser, "dave");
  EXPECT_TRUE(submit(dave, "dave", "default").ok());
  EXPECT_FALSE(submit(dave, "dave", "nlp").ok());
  // Operators submit to any team, as themselves; admins as anyone.
  EXPECT_TRUE(submit(RestCaller(Role::kOperator, "op"), "op", "speech").ok());
  EXPECT_FALSE(submit(RestCaller(Role::kOperator, "op"), "bob", "speech").ok());
  EXPECT_TRUE(submit(RestCaller(Role::kAdmin, "root"), "bob", "speech").ok());
}

// --- Audit -------------------------------------------------------------------------------------

TEST(AuditLogTest, WritesOneJsonLinePerWriteRequest) {
  TempDir dir;
  const std::string path = dir.path() + "/audit.log";
  auto log = AuditLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status().message();
  const Caller alice = RestCaller(Role::kUser, "alice");
  (*log)->Record(alice, "POST", "/api/v1/tasks", 201, "task-7");
  (*log)->Record(alice, "GET", "/api/v1/tasks", 200, "");  // Reads are not recorded.
  (*log)->Record(Caller{Caller::Transport::kRest, "127.0.0.1:9", {}}, "DELETE",
                 "/api/v1/tasks/task-7", 403, "task-7");
  std::filesystem::rename(path, path + ".1");  // logrotate
  ASSERT_TRUE((*log)->Reopen().ok());
  (*log)->Record(alice, "PUT", "/api/v1/quota", 403, "");

  std::ifstream first(path + ".1");
  std::string line;
  std::vector<json> lines;
  while (std::getline(first, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["user"], "alice");
  EXPECT_EQ(lines[0]["role"], "user");
  EXPECT_EQ(lines[0]["peer"], "192.0.2.1:1");
  EXPECT_EQ(lines[0]["method"], "POST");
  EXPECT_EQ(lines[0]["path"], "/api/v1/tasks");
  EXPECT_EQ(lines[0]["status"], 201);
  EXPECT_EQ(lines[0]["task_id"], "task-7");
  EXPECT_TRUE(lines[0]["time"].get<std::string>().ends_with("Z"));
  EXPECT_TRUE(lines[1]["user"].is_null());
  EXPECT_EQ(lines[1]["role"], "none");
  EXPECT_EQ(lines[1]["status"], 403);
  std::ifstream second(path);
  ASSERT_TRUE(std::getline(second, line));
  EXPECT_EQ(json::parse(line)["path"], "/api/v1/quota");
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::none);
}

}  // namespace
}  // namespace dgpu::scheduler
