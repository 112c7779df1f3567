// What a client sends to be let in: the tokens file, an Authorization header (token mode) and a
// JWT (HS256, verified against a fixed secret). The first byte picks which.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "scheduler/auth.h"

namespace {

using namespace dgpu::scheduler;

struct Fixture {
  std::unique_ptr<Authenticator> tokens;
  std::unique_ptr<JwtVerifier> jwt;
  Fixture() {
    char dir[] = "/tmp/dgpu-fuzz-auth-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    const std::string tokens_file = std::string(dir) + "/tokens.yaml";
    std::ofstream(tokens_file) << "users:\n  - {name: alice, token_sha256: "
                               << Sha256Hex("alice-token") << ", role: user, teams: [nlp]}\n";
    const std::string secret_file = std::string(dir) + "/secret";
    std::ofstream(secret_file) << "fuzz-secret-0123456789abcdef-0123456789";
    dgpu::common::AuthConfig cfg;
    cfg.mode = dgpu::common::AuthMode::kToken;
    cfg.tokens_file = tokens_file;
    auto a = Authenticator::Create(cfg);
    dgpu::common::JwtConfig jc;
    jc.issuer = "fuzz";
    jc.audience = "dgpu";
    jc.hs256_secret_file = secret_file;
    auto j = JwtVerifier::Create(jc);
    if (!a.ok() || !j.ok()) std::abort();
    tokens = std::move(*a);
    jwt = std::move(*j);
    unlink(tokens_file.c_str());
    unlink(secret_file.c_str());
    rmdir(dir);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)TokenTable::Parse(input, "tokens.yaml");
      break;
    case 1:
      (void)fixture.tokens->Authenticate(input, "192.0.2.1:1");
      break;
    default:
      (void)fixture.jwt->Verify(input, 1'800'000'000);
      break;
  }
  return 0;
}
