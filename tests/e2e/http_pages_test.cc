// The real server's HTTP pages under a slow-connection attack: many
// unauthenticated connections that never finish their request, from the
// reader's own address and from another, do not keep a reader with a valid
// token from /metrics; every answer says nosniff.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::ServerProcess;


// One GET of `target` with `headers`; the whole response.
std::string Get(int port, const std::string& target, const std::string& headers) {
  const int fd = testing::ConnectLoopback(port, "127.0.0.1");
  if (fd < 0) return "connect failed";
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) resp.append(buf, size_t(n));
  close(fd);
  return resp;
}

int StatusOf(const std::string& response) {
  int status = -1;
  if (response.size() > 12) absl::SimpleAtoi(response.substr(9, 3), &status);
  return status;
}

TEST(HttpPages, SlowConnectionsDoNotKeepAReaderOut) {
  testing::TempDir dir;
  const std::string reader = "tf_reader0000000000000000000000000000000000000";
  testing::WriteFile(dir.File("tokens"), reader + " reader name=dash\n");
  const std::string port_file = dir.File("http-port");
  // Small caps, and a head deadline longer than the test: only the caps
  // and the reading of heads without a thread each keep the reader in.
  auto server =
      ServerProcess::Start(dir.File("farm.db"), dir.path(),
                           {"--tokens_file=" + dir.File("tokens"), "--http_listen=127.0.0.1:0",
                            "--http_port_file=" + port_file, "--http_max_connections=16",
                            "--http_max_connections_per_peer=8", "--http_head_timeout_ms=600000"});
  ASSERT_TRUE(server.ok()) << server.status();
  int http = 0;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFileOrEmpty(port_file)),
                                &http) &&
               http > 0;
      },
      absl::Seconds(30)));

  // 40 connections from the reader's address and 40 from another, each
  // sending its head a byte every 100 ms and never finishing it; one the
  // server closes is opened again.
  std::atomic<bool> stop{false};
  std::vector<std::thread> attackers;
  for (const char* source : {"127.0.0.1", "127.0.0.2"}) {
    attackers.emplace_back([&stop, http, source] {
      std::vector<int> fds(40, -1);
      const std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      size_t sent = 0;
      while (!stop) {
        for (int& fd : fds) {
          if (fd >= 0) {
            const char c = head[sent % head.size()];
            if (send(fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN) {
              close(fd);
              fd = -1;
            }
          }
          if (fd < 0) fd = testing::ConnectLoopback(http, source);
        }
        ++sent;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      for (int fd : fds) {
        if (fd >= 0) close(fd);
      }
    });
  }
  // Let them take every slot first.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  int answered = 0;
  for (int i = 0; i < 25; ++i) {
    const std::string r = Get(http, "/metrics", "Authorization: Bearer " + reader + "\r\n");
    answered += StatusOf(r) == 200;
    EXPECT_EQ(StatusOf(r), 200) << "try " << i << ": " << r.substr(0, 300);
    EXPECT_TRUE(absl::StrContains(r, "\r\nX-Content-Type-Options: nosniff\r\n"))
        << r.substr(0, 300);
  }
  EXPECT_EQ(answered, 25);
  // Without the token: 401, also nosniff.
  const std::string anonymous = Get(http, "/metrics", "");
  EXPECT_EQ(StatusOf(anonymous), 401) << anonymous;
  EXPECT_TRUE(absl::StrContains(anonymous, "\r\nX-Content-Type-Options: nosniff\r\n"));
  stop = true;
  for (std::thread& t : attackers) t.join();
}

}  // namespace
}  // namespace tunefarm
