#include "common/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include "gtest/gtest.h"

namespace tunefarm {
namespace {

TEST(Subprocess, ReadsLinesAndExitCode) {
  auto child = Subprocess::Start({"/bin/sh", "-c", "echo one; echo two; exit 3"});
  ASSERT_TRUE(child.ok()) << child.status();
  std::string line;
  ASSERT_TRUE((*child)->ReadLine(&line, absl::Seconds(10)).ok());
  EXPECT_EQ(line, "one");
  ASSERT_TRUE((*child)->ReadLine(&line, absl::Seconds(10)).ok());
  EXPECT_EQ(line, "two");
  EXPECT_TRUE(absl::IsOutOfRange((*child)->ReadLine(&line, absl::Seconds(10))));
  auto status = (*child)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with 3");
}

TEST(Subprocess, KillAndTimeouts) {
  auto child = Subprocess::Start({"/bin/sleep", "60"});
  ASSERT_TRUE(child.ok());
  std::string line;
  EXPECT_TRUE(absl::IsDeadlineExceeded((*child)->ReadLine(&line, absl::Milliseconds(50))));
  EXPECT_TRUE(absl::IsDeadlineExceeded((*child)->Wait(absl::Milliseconds(50)).status()));
  (*child)->Kill(SIGKILL);
  auto status = (*child)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(DescribeWaitStatus(*status), "killed by signal 9");
}

TEST(Subprocess, MissingBinaryExits127) {
  auto child = Subprocess::Start({"/nonexistent/binary"});
  ASSERT_TRUE(child.ok());
  auto status = (*child)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 127);
}

}  // namespace
}  // namespace tunefarm
