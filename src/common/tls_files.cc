#include "common/tls_files.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <ctime>
#include <memory>

namespace dgpu::common {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

BioPtr MemBio(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string Key(std::string_view prefix, std::string_view field) {
  return std::string(prefix) + "." + std::string(field);
}

// Every certificate of a PEM bundle; an error when there is none.
StatusOr<std::vector<X509Ptr>> ParseCertificates(const std::string& key, const std::string& path,
                                                 const std::string& pem) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();
  if (certs.empty()) {
    return InvalidArgument(key + ": " + path + " holds no PEM certificate");
  }
  return certs;
}

int64_t NotAfter(const X509* cert) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

std::string FormatUtc(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm = {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> NamesOf(X509* cert) {
  std::vector<std::string> names;
  char cn[256];
  const int n =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  if (n > 0) names.emplace_back(cn, static_cast<size_t>(n));
  auto add = [&names](std::string name) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(std::move(name));
  };
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans == nullptr) return names;
  for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
    if (g->type == GEN_DNS) {
      const ASN1_IA5STRING* s = g->d.dNSName;
      add(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                      static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (g->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = g->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = ASN1_STRING_length(s) == 4 ? AF_INET : AF_INET6;
      if (inet_ntop(family, ASN1_STRING_get0_data(s), text, sizeof(text)) != nullptr) {
        add(text);
      }
    }
  }
  GENERAL_NAMES_free(sans);
  return names;
}

// Reads `cert_field` and `key_field` of `prefix` into `out`: a certificate chain that is in its
// validity period and a private key that belongs to its first certificate.
Status LoadPair(std::string_view prefix, std::string_view cert_field, const std::string& cert_path,
                std::string_view key_field, const std::string& key_path, TlsMaterial* out) {
  const std::string cert_key = Key(prefix, cert_field);
  const std::string key_key = Key(prefix, key_field);
  auto cert_pem = ReadConfiguredFile(cert_key, cert_path);
  if (!cert_pem.ok()) return cert_pem.status();
  auto certs = ParseCertificates(cert_key, cert_path, *cert_pem);
  if (!certs.ok()) return certs.status();
  X509* leaf = certs->front().get();
  auto key_pem = ReadConfiguredFile(key_key, key_path);
  if (!key_pem.ok()) return key_pem.status();
  BioPtr bio = MemBio(*key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key) {
    return InvalidArgument(key_key + ": " + key_path +
                           " holds no PEM private key (an encrypted key is not supported)");
  }
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(key_key + ": " + key_path + " is not the key of the certificate in " +
                           cert_key + " (" + cert_path + ")");
  }
  time_t now = time(nullptr);
  out->not_after_unix = NotAfter(leaf);
  if (X509_cmp_time(X509_get0_notAfter(leaf), &now) < 0) {
    return InvalidArgument(cert_key + ": the certificate in " + cert_path + " expired on " +
                           FormatUtc(out->not_after_unix) + "; issue a new one");
  }
  if (X509_cmp_time(X509_get0_notBefore(leaf), &now) > 0) {
    return InvalidArgument(cert_key + ": the certificate in " + cert_path +
                           " is not valid yet (check the clocks of this host and of the CA)");
  }
  out->names = NamesOf(leaf);
  out->cert = std::move(*cert_pem);
  out->key = std::move(*key_pem);
  return OkStatus();
}

Status LoadCa(std::string_view prefix, std::string_view field, const std::string& path,
              TlsMaterial* out) {
  const std::string key = Key(prefix, field);
  auto pem = ReadConfiguredFile(key, path);
  if (!pem.ok()) return pem.status();
  auto certs = ParseCertificates(key, path, *pem);
  if (!certs.ok()) return certs.status();
  out->ca = std::move(*pem);
  return OkStatus();
}

}  // namespace

StatusOr<TlsMaterial> LoadServerTls(const ServerTlsConfig& config, std::string_view prefix) {
  TlsMaterial out;
  Status s = LoadPair(prefix, "cert_file", config.cert_file, "key_file", config.key_file, &out);
  if (s.ok() && !config.client_ca_file.empty()) {
    s = LoadCa(prefix, "client_ca_file", config.client_ca_file, &out);
  }
  if (!s.ok()) return s;
  return out;
}

StatusOr<TlsMaterial> LoadClientTls(const ClientTlsConfig& config, std::string_view prefix) {
  TlsMaterial out;
  Status s = LoadCa(prefix, "ca_file", config.ca_file, &out);
  if (s.ok() && !config.cert_file.empty()) {
    s = LoadPair(prefix, "cert_file", config.cert_file, "key_file", config.key_file, &out);
  }
  if (!s.ok()) return s;
  return out;
}

std::vector<std::string> CertificateNames(std::string_view pem) {
  BioPtr bio = MemBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!cert) return {};
  return NamesOf(cert.get());
}

}  // namespace dgpu::common
