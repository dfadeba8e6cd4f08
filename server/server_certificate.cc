#include "server/server_certificate.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "grpc/grpc.h"

namespace tunefarm::server {
namespace {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;

// The text OpenSSL leaves about the last failure (and clears its queue).
std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, size_t(n)) : std::string();
}

// Never asks for a passphrase (OpenSSL's default prompts on the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

ServerCertificate::Info Describe(X509* cert) {
  ServerCertificate::Info info;
  BioPtr out(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(out.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  info.subject = BioText(out.get());
  if (BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(cert), nullptr)) {
    if (char* hex = BN_bn2hex(bn)) {
      info.serial = hex;
      OPENSSL_free(hex);
    }
    BN_free(bn);
  }
  out.reset(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(out.get(), X509_get0_notAfter(cert));
  info.not_after = BioText(out.get());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &len) == 1) {
    static constexpr char kHex[] = "0123456789abcdef";
    for (unsigned int i = 0; i < len; ++i) {
      info.sha256.push_back(kHex[md[i] >> 4]);
      info.sha256.push_back(kHex[md[i] & 15]);
    }
  }
  return info;
}

// The checks of server_certificate.h on a pair read from `cert_file` and
// `key_file`; the error names the file at fault.
absl::StatusOr<ServerCertificate::Info> CheckPair(const std::string& cert_pem,
                                                  const std::string& key_pem,
                                                  const std::string& cert_file,
                                                  const std::string& key_file) {
  ERR_clear_error();
  BioPtr certs = MemoryBio(cert_pem);
  X509Ptr leaf(PEM_read_bio_X509(certs.get(), nullptr, NoPassphrase, nullptr));
  if (leaf == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate file ", cert_file, " holds no PEM certificate (", OpenSslError(), ")"));
  }
  // The rest of the chain, up to the end of the file (which reads as "no
  // start line"; any other error is a certificate that does not parse).
  int n = 1;
  while (X509Ptr(PEM_read_bio_X509(certs.get(), nullptr, NoPassphrase, nullptr))) ++n;
  const unsigned long end = ERR_peek_last_error();
  if (ERR_GET_LIB(end) != ERR_LIB_PEM || ERR_GET_REASON(end) != PEM_R_NO_START_LINE) {
    return absl::InvalidArgumentError(absl::StrCat("certificate file ", cert_file, ": certificate ",
                                                   n + 1, " of the chain does not parse (",
                                                   OpenSslError(), ")"));
  }
  ERR_clear_error();
  BioPtr key_bio = MemoryBio(key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key file ", key_file, " holds no unencrypted PEM private key (", OpenSslError(), ")"));
  }
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("the key in ", key_file,
                                                   " is not the key of the certificate in ",
                                                   cert_file, " (replace both, as a pair)"));
  }
  ServerCertificate::Info info = Describe(leaf.get());
  if (X509_cmp_current_time(X509_get0_notBefore(leaf.get())) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate in ", cert_file, " is not valid yet"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf.get())) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate in ", cert_file, " expired on ", info.not_after));
  }
  return info;
}

// grpc::ServerCredentials over TLS server credentials made with gRPC's C
// API (which has the certificate config fetcher the C++ API lacks).
class FetcherServerCredentials final : public grpc::ServerCredentials {
 public:
  FetcherServerCredentials(grpc_ssl_server_certificate_config_callback fetch, void* user_data)
      : creds_(grpc_ssl_server_credentials_create_with_options(
            grpc_ssl_server_credentials_create_options_using_config_fetcher(
                GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, fetch, user_data))) {}
  ~FetcherServerCredentials() override { grpc_server_credentials_release(creds_); }

  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<ServerCertificate>> ServerCertificate::Load(
    const std::string& cert_file, const std::string& key_file) {
  std::shared_ptr<ServerCertificate> c(new ServerCertificate(cert_file, key_file));
  TF_RETURN_IF_ERROR(c->Reload().status());
  return c;
}

absl::StatusOr<ServerCertificate::Info> ServerCertificate::Reload() {
  absl::StatusOr<std::string> cert = ReadFile(cert_file_);
  if (!cert.ok())
    return absl::NotFoundError(absl::StrCat("cannot read certificate file ", cert_file_));
  absl::StatusOr<std::string> key = ReadFile(key_file_);
  if (!key.ok()) return absl::NotFoundError(absl::StrCat("cannot read key file ", key_file_));
  TF_ASSIGN_OR_RETURN(Info info, CheckPair(*cert, *key, cert_file_, key_file_));
  absl::MutexLock lock(&mu_);
  cert_pem_ = *std::move(cert);
  key_pem_ = *std::move(key);
  info_ = info;
  fetched_ = false;
  return info;
}

ServerCertificate::Info ServerCertificate::current() const {
  absl::MutexLock lock(&mu_);
  return info_;
}

std::shared_ptr<grpc::ServerCredentials> ServerCertificate::Credentials() {
  return std::make_shared<FetcherServerCredentials>(&ServerCertificate::Fetch, this);
}

grpc_ssl_certificate_config_reload_status ServerCertificate::Fetch(
    void* self, grpc_ssl_server_certificate_config** config) {
  auto* c = static_cast<ServerCertificate*>(self);
  absl::MutexLock lock(&c->mu_);
  if (c->fetched_) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  const grpc_ssl_pem_key_cert_pair pair = {c->key_pem_.c_str(), c->cert_pem_.c_str()};
  // gRPC's fetcher path needs client root certificates even when no client
  // certificate is asked for (they are then never used): the server's own
  // chain stands in.
  *config = grpc_ssl_server_certificate_config_create(c->cert_pem_.c_str(), &pair, 1);
  c->fetched_ = true;
  return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

}  // namespace tunefarm::server
