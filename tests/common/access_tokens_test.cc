// The tokens file: roles, limits, digests, and the errors that keep a typo
// from locking everyone out or letting everyone in.
#include "common/access_tokens.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "gtest/gtest.h"

namespace tunefarm {
namespace {

TEST(AccessTokens, RolesLimitsAndDigests) {
  const std::string text = absl::StrCat(
      "# farm tokens\n"
      "reader-secret reader name=dash\n"
      "\n"
      "sha256:",
      Sha256Hex("agent-secret"), "  agent name=orin-01 keys=jetson-orin devices=orin-*\n",
      "builder-secret\tworker devices=w-1   # one build host\n"
      "legacy-secret\n");
  std::vector<std::string> warnings;
  absl::StatusOr<AccessTokens> t = AccessTokens::FromText(text, "tokens", &warnings);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 4u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "tokens line 6: a token with no role is an admin token");

  const AccessToken* reader = t->Find("reader-secret");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->role, TokenRole::kReader);
  EXPECT_EQ(reader->name, "dash");
  const AccessToken* agent = t->Find("agent-secret");  // given as its digest
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(agent->role, TokenRole::kAgent);
  EXPECT_TRUE(agent->MayRegister("orin-01", "jetson-orin"));
  EXPECT_TRUE(agent->MayRegister("orin-17", "jetson-orin"));
  EXPECT_FALSE(agent->MayRegister("xavier-01", "jetson-orin"));
  EXPECT_FALSE(agent->MayRegister("orin-01", "x86-avx512"));
  const AccessToken* worker = t->Find("builder-secret");
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->role, TokenRole::kWorker);
  EXPECT_TRUE(worker->MayRegister("w-1", ""));
  EXPECT_FALSE(worker->MayRegister("w-10", ""));
  const AccessToken* legacy = t->Find("legacy-secret");
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(legacy->role, TokenRole::kAdmin);
  EXPECT_EQ(legacy->name, "token-" + Sha256Hex("legacy-secret").substr(0, 8));

  EXPECT_EQ(t->Find("reader-secre"), nullptr);
  EXPECT_EQ(t->Find(""), nullptr);
  EXPECT_EQ(t->Find(Sha256Hex("agent-secret")), nullptr);  // the digest is not the secret
}

TEST(AccessTokens, EveryMistakeIsAnErrorNamingItsLine) {
  auto error = [](const std::string& text) {
    absl::StatusOr<AccessTokens> t = AccessTokens::FromText(text, "tokens");
    EXPECT_FALSE(t.ok()) << text;
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_EQ(error("a reader\nb boss\n"),
            "tokens line 2: unknown role 'boss' (roles: reader, submitter, admin, worker, agent)");
  EXPECT_EQ(error("a reader keys=k\n"), "tokens line 1: keys= is for agent tokens, not reader");
  EXPECT_EQ(error("a worker keys=k\n"), "tokens line 1: keys= is for agent tokens, not worker");
  EXPECT_EQ(error("a submitter devices=d\n"),
            "tokens line 1: devices= is for agent and worker tokens, not submitter");
  EXPECT_EQ(error("a agent color=red\n"),
            "tokens line 1: unknown field 'color' (name=, keys=, devices=)");
  EXPECT_EQ(error("a agent name\n"),
            "tokens line 1: 'name' is not NAME=VALUE (name=, keys=, devices=)");
  EXPECT_EQ(error("a agent name=x\x1b[2J\n"), "tokens line 1: name= takes [A-Za-z0-9._:-]");
  EXPECT_EQ(error("a agent devices=a,b;c\n"),
            "tokens line 1: 'b;c' in devices= is not [A-Za-z0-9._:-] with an optional final *");
  EXPECT_EQ(error("sha256:abc admin\n"),
            "tokens line 1: sha256: needs 64 lower-case hex digits (`tunefarm token` prints them)");
  EXPECT_EQ(error(absl::StrCat("same admin\nsha256:", Sha256Hex("same"), " reader\n")),
            "tokens line 2: the same token again");
  EXPECT_EQ(error("# nothing but comments\n\n"),
            "tokens has no tokens (it would lock everyone out)");
}

TEST(AccessTokens, PermissionsOfEachRole) {
  struct Row {
    TokenRole role;
    bool read, submit, admin, farm;
  };
  for (const Row& r : {Row{TokenRole::kReader, true, false, false, false},
                       Row{TokenRole::kSubmitter, true, true, false, false},
                       Row{TokenRole::kAdmin, true, true, true, true},
                       Row{TokenRole::kWorker, false, false, false, true},
                       Row{TokenRole::kAgent, false, false, false, true}}) {
    SCOPED_TRACE(std::string(TokenRoleName(r.role)));
    EXPECT_EQ(Grants(r.role, Permission::kRead), r.read);
    EXPECT_EQ(Grants(r.role, Permission::kSubmit), r.submit);
    EXPECT_EQ(Grants(r.role, Permission::kAdmin), r.admin);
    EXPECT_EQ(Grants(r.role, Permission::kFarm), r.farm);
    absl::StatusOr<TokenRole> parsed = ParseTokenRole(TokenRoleName(r.role));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, r.role);
  }
}

TEST(AccessTokens, NewSecretsAreRandomAndTheirLinesParse) {
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<std::string> s = NewTokenSecret();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->size(), 46u) << *s;
    EXPECT_EQ(s->substr(0, 3), "tf_");
    for (char c : s->substr(3))
      EXPECT_TRUE(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') << *s;
    EXPECT_TRUE(seen.insert(*s).second);
  }
  AccessToken t;
  t.digest = Sha256Hex(*seen.begin());
  t.role = TokenRole::kAgent;
  t.name = "orin-01";
  t.keys = {"jetson-orin"};
  t.devices = {"orin-01", "orin-02"};
  const std::string line = TokensFileLine(t);
  EXPECT_EQ(line, absl::StrCat("sha256:", t.digest,
                               " agent name=orin-01 keys=jetson-orin devices=orin-01,orin-02"));
  absl::StatusOr<AccessTokens> parsed = AccessTokens::FromText(line, "line");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const AccessToken* found = parsed->Find(*seen.begin());
  ASSERT_NE(found, nullptr);
  EXPECT_TRUE(found->MayRegister("orin-02", "jetson-orin"));
  absl::StatusOr<std::string> hex = RandomHex(16);
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(hex->size(), 32u);
  EXPECT_NE(*hex, *RandomHex(16));
}

}  // namespace
}  // namespace tunefarm
