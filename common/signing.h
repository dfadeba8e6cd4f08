// Ed25519 signatures (OpenSSL) for what the server hands its agents: the
// server signs each lease's code, an agent installed with the server's
// public key runs only code whose signature verifies. docs/security.md.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace tunefarm {

class Signer {
 public:
  // The private key in PEM file `path`, made (mode 0600, with the public key
  // beside it as `path`.pub) when there is none.
  static absl::StatusOr<Signer> LoadOrCreate(const std::string& path);

  // 64 bytes.
  absl::StatusOr<std::string> Sign(absl::string_view message) const;
  // The public key as PEM (what agents are installed with).
  std::string PublicPem() const;

 private:
  std::shared_ptr<EVP_PKEY> key_;
};

class Verifier {
 public:
  // A PEM public key file (`Signer`'s `path`.pub).
  static absl::StatusOr<Verifier> FromPemFile(const std::string& path);
  static absl::StatusOr<Verifier> FromPem(absl::string_view pem);

  bool Verify(absl::string_view message, absl::string_view signature) const;

 private:
  std::shared_ptr<EVP_PKEY> key_;
};

// What a lease's signature covers: its id and the SHA-256 of every piece
// of code it carries (a measurement's artifact and reference artifact, a
// model run's package) and of `arguments`, what says how to call the code
// (empty pieces hash as empty). proto/protocol.h's SignedPartOf picks them
// from a lease.
std::string LeaseSigningMessage(absl::string_view lease_id, absl::string_view artifact,
                                absl::string_view reference_artifact, absl::string_view package,
                                absl::string_view arguments);

}  // namespace tunefarm
