// Lease signatures: what the server signs verifies with its public key
// only, and any change to the lease id or the code breaks it.
#include "common/signing.h"

#include <sys/stat.h>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

TEST(Signing, SignedLeasesVerifyAndTamperedOnesDoNot) {
  testing::TempDir dir;
  const std::string path = dir.File("server.signing-key");
  absl::StatusOr<Signer> signer = Signer::LoadOrCreate(path);
  ASSERT_TRUE(signer.ok()) << signer.status();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the private key is readable by others";
  absl::StatusOr<Verifier> verifier = Verifier::FromPemFile(path + ".pub");
  ASSERT_TRUE(verifier.ok()) << verifier.status();

  const std::string message =
      LeaseSigningMessage("L1", "kernel bytes", "reference bytes", "", "args");
  absl::StatusOr<std::string> sig = signer->Sign(message);
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->size(), 64u);
  EXPECT_TRUE(verifier->Verify(message, *sig));
  // Another lease, other code, a flipped bit, no signature: refused.
  EXPECT_FALSE(verifier->Verify(
      LeaseSigningMessage("L2", "kernel bytes", "reference bytes", "", "args"), *sig));
  EXPECT_FALSE(verifier->Verify(
      LeaseSigningMessage("L1", "evil bytes", "reference bytes", "", "args"), *sig));
  EXPECT_FALSE(
      verifier->Verify(LeaseSigningMessage("L1", "kernel bytes", "", "package", "args"), *sig));
  EXPECT_FALSE(verifier->Verify(
      LeaseSigningMessage("L1", "kernel bytes", "reference bytes", "", "other args"), *sig));
  std::string flipped = *sig;
  flipped[10] ^= 1;
  EXPECT_FALSE(verifier->Verify(message, flipped));
  EXPECT_FALSE(verifier->Verify(message, ""));

  // Loaded again: the same key. Another key's signature does not verify.
  absl::StatusOr<Signer> again = Signer::LoadOrCreate(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->PublicPem(), signer->PublicPem());
  absl::StatusOr<Signer> other = Signer::LoadOrCreate(dir.File("other-key"));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(verifier->Verify(message, *other->Sign(message)));

  // Files that are not keys are refused with their name.
  testing::WriteFile(dir.File("junk.pub"), "not a key");
  absl::StatusOr<Verifier> junk = Verifier::FromPemFile(dir.File("junk.pub"));
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(std::string(junk.status().message()).find("junk.pub"), std::string::npos);
  EXPECT_FALSE(Signer::LoadOrCreate(dir.File("junk.pub")).ok());
}

}  // namespace
}  // namespace tunefarm
