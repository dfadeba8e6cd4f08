#include "common/signing.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/sha256.h"

namespace tunefarm {
namespace {

std::string OpensslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::shared_ptr<EVP_PKEY> Own(EVP_PKEY* k) { return std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free); }

absl::Status WriteNew(const std::string& path, const std::string& text, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  ok = close(fd) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string Pem(EVP_PKEY* key, bool private_key) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  const int ok = private_key
                     ? PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr)
                     : PEM_write_bio_PUBKEY(bio, key);
  std::string out;
  if (ok == 1) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    out.assign(data, size_t(n));
  }
  BIO_free(bio);
  return out;
}

}  // namespace

absl::StatusOr<Signer> Signer::LoadOrCreate(const std::string& path) {
  Signer s;
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (pem.ok()) {
    BIO* bio = BIO_new_mem_buf(pem->data(), int(pem->size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (key == nullptr || EVP_PKEY_id(key) != EVP_PKEY_ED25519) {
      if (key != nullptr) EVP_PKEY_free(key);
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is not an Ed25519 private key in PEM (the server's signing key)"));
    }
    s.key_ = Own(key);
    return s;
  }
  EVP_PKEY* key = nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  const bool made =
      ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &key) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!made) return absl::InternalError(absl::StrCat("making a signing key: ", OpensslError()));
  s.key_ = Own(key);
  absl::Status w = WriteNew(path, Pem(key, true), 0600);
  if (!w.ok()) return w;
  w = WriteNew(path + ".pub", Pem(key, false), 0644);
  if (!w.ok()) return w;
  return s;
}

absl::StatusOr<std::string> Signer::Sign(absl::string_view message) const {
  std::string sig(64, '\0');
  size_t len = sig.size();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_.get()) == 1 &&
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) return absl::InternalError(absl::StrCat("signing: ", OpensslError()));
  sig.resize(len);
  return sig;
}

std::string Signer::PublicPem() const { return Pem(key_.get(), false); }

absl::StatusOr<Verifier> Verifier::FromPem(absl::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), int(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr || EVP_PKEY_id(key) != EVP_PKEY_ED25519) {
    if (key != nullptr) EVP_PKEY_free(key);
    return absl::InvalidArgumentError("not an Ed25519 public key in PEM");
  }
  Verifier v;
  v.key_ = Own(key);
  return v;
}

absl::StatusOr<Verifier> Verifier::FromPemFile(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<Verifier> v = FromPem(*pem);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", v.status().message(), " (the server's signing-key .pub file)"));
  }
  return v;
}

bool Verifier::Verify(absl::string_view message, absl::string_view signature) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, key_.get()) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  ERR_clear_error();
  return ok;
}

std::string LeaseSigningMessage(absl::string_view lease_id, absl::string_view artifact,
                                absl::string_view reference_artifact, absl::string_view package,
                                absl::string_view arguments) {
  auto digest = [](absl::string_view bytes) {
    return Sha256Hex(std::string_view(bytes.data(), bytes.size()));
  };
  return absl::StrCat("tunefarm-lease-v2\n", lease_id, "\n", digest(artifact), "\n",
                      digest(reference_artifact), "\n", digest(package), "\n", digest(arguments),
                      "\n");
}

}  // namespace tunefarm
