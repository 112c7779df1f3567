// What authentication adds to a REST request: a bearer token looked up in the tokens table, a
// JWT found in the cache, and a JWT verified from scratch (HS256, RS256).
//   build/bin/auth_bench
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "scheduler/auth.h"

namespace dgpu::scheduler {
namespace {

std::string Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/dgpu-auth-bench-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return dir;
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = Dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Signing(const char* alg) {
  nlohmann::json claims = {{"iss", "bench"},
                           {"aud", "dgpu"},
                           {"sub", "alice"},
                           {"teams", {"nlp"}},
                           {"exp", static_cast<int64_t>(std::time(nullptr)) + 3600}};
  return Base64UrlEncode(nlohmann::json({{"alg", alg}}).dump()) + "." +
         Base64UrlEncode(claims.dump());
}

const std::string kSecret = "bench-secret-0123456789abcdef-0123456789";

std::string Hs256Token() {
  const std::string s = Signing("HS256");
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()),
       reinterpret_cast<const unsigned char*>(s.data()), s.size(), mac, &len);
  return s + "." + Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), len));
}

common::JwtConfig JwtConfig() {
  common::JwtConfig cfg;
  cfg.issuer = "bench";
  cfg.audience = "dgpu";
  return cfg;
}

// 1,000 users; the one asked for is in the middle.
void BM_TokenLookup(benchmark::State& state) {
  std::string yaml = "users:\n";
  for (int i = 0; i < 1000; ++i) {
    yaml += "  - {name: u" + std::to_string(i) +
            ", token_sha256: " + Sha256Hex("token-" + std::to_string(i)) + ", role: user}\n";
  }
  common::AuthConfig cfg;
  cfg.mode = common::AuthMode::kToken;
  cfg.tokens_file = Write("tokens.yaml", yaml);
  auto auth = Authenticator::Create(cfg);
  const std::string header = "Bearer token-500";
  for (auto _ : state) {
    auto r = (*auth)->Authenticate(header, "127.0.0.1:1");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_TokenLookup);

void BM_JwtCached(benchmark::State& state) {
  common::AuthConfig cfg;
  cfg.mode = common::AuthMode::kJwt;
  cfg.jwt = JwtConfig();
  cfg.jwt.hs256_secret_file = Write("secret", kSecret);
  auto auth = Authenticator::Create(cfg);
  const std::string header = "Bearer " + Hs256Token();
  for (auto _ : state) {
    auto r = (*auth)->Authenticate(header, "127.0.0.1:1");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_JwtCached);

void BM_JwtVerifyHs256(benchmark::State& state) {
  common::JwtConfig cfg = JwtConfig();
  cfg.hs256_secret_file = Write("secret", kSecret);
  auto v = JwtVerifier::Create(cfg);
  const std::string token = Hs256Token();
  const int64_t now = std::time(nullptr);
  for (auto _ : state) {
    auto r = (*v)->Verify(token, now);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_JwtVerifyHs256);

void BM_JwtVerifyRs256(benchmark::State& state) {
  EVP_PKEY* key = EVP_RSA_gen(2048);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key);
  char* pem = nullptr;
  const long pem_len = BIO_get_mem_data(bio, &pem);
  common::JwtConfig cfg = JwtConfig();
  cfg.rs256_public_key_file = Write("key.pem", std::string(pem, pem_len));
  BIO_free(bio);
  const std::string s = Signing("RS256");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t sig_len = 512;
  std::string sig(sig_len, '\0');
  EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key);
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &sig_len,
                 reinterpret_cast<const unsigned char*>(s.data()), s.size());
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  const std::string token = s + "." + Base64UrlEncode(sig.substr(0, sig_len));
  auto v = JwtVerifier::Create(cfg);
  const int64_t now = std::time(nullptr);
  for (auto _ : state) {
    auto r = (*v)->Verify(token, now);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_JwtVerifyRs256);

}  // namespace
}  // namespace dgpu::scheduler

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(dgpu::scheduler::Dir());
  return 0;
}
