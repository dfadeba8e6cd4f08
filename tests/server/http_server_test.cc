// The HTTP pages' server against clients that hold on (server/http_server.h):
// slow connections of one peer never keep a quick client out, a peer holds
// at most its cap, a head has a deadline, a response a send timeout, and
// every answer says nosniff. Real sockets on 127.0.0.0/8.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace tunefarm::server {
namespace {


void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

// Everything the server sends until it closes (or 60 s of silence).
std::string ReadAll(int fd) {
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, size_t(n));
  return out;
}

int StatusOf(const std::string& response) {
  int status = -1;
  if (response.size() > 12) absl::SimpleAtoi(response.substr(9, 3), &status);
  return status;
}

// One GET whose head is sent at once; the whole response.
std::string Get(int port, const std::string& target = "/", const char* source = "127.0.0.1") {
  const int fd = testing::ConnectLoopback(port, source);
  if (fd < 0) return "";
  Send(fd, "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string out = ReadAll(fd);
  close(fd);
  return out;
}

// Whether the server has closed `fd` (without waiting): an end of stream,
// or a reset where it closed before reading what was sent.
bool ClosedByServer(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

HttpServer::Handler Pages() {
  return [](const HttpRequest& r) -> HttpResponse {
    if (r.path == "/big") return {200, "text/plain", std::string(64 << 20, 'x')};
    if (r.path == "/") return {200, "text/html", "<p>ok</p>"};
    return {404, "text/plain", "no\n"};
  };
}

// Slow connections that never finish their head, many more than the caps,
// from the quick client's own address: each quick request still gets its
// answer, taking the place of the oldest slow one.
TEST(HttpServer, SlowConnectionsOfOnePeerKeepNoQuickClientOut) {
  HttpServer::Options o;
  o.max_connections = 8;
  o.max_connections_per_peer = 4;
  o.head_timeout = absl::Minutes(10);  // only the caps make room
  auto server = HttpServer::Start("127.0.0.1:0", Pages(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int fd = testing::ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    Send(fd, "GET / HTTP/1.1\r\nHost: ");
    slow.push_back(fd);
  }
  for (int i = 0; i < 25; ++i) {
    const std::string r = Get(port);
    EXPECT_EQ(StatusOf(r), 200) << "try " << i << ": " << r;
  }
  for (int fd : slow) close(fd);
}

// One peer (127.0.0.2) holds at most its cap of connections; the others
// are closed, and a client of another address is answered every time.
TEST(HttpServer, APeerHoldsAtMostItsCap) {
  HttpServer::Options o;
  o.max_connections = 8;
  o.max_connections_per_peer = 4;
  o.head_timeout = absl::Minutes(10);
  auto server = HttpServer::Start("127.0.0.1:0", Pages(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int fd = testing::ConnectLoopback(port, "127.0.0.2");
    ASSERT_GE(fd, 0);
    Send(fd, "GET / HT");
    slow.push_back(fd);
  }
  auto closed = [&] {
    int n = 0;
    for (int fd : slow) n += ClosedByServer(fd);
    return n;
  };
  EXPECT_TRUE(testing::WaitFor([&] { return closed() == 36; }, absl::Seconds(60))) << closed();
  for (int i = 0; i < 25; ++i) EXPECT_EQ(StatusOf(Get(port)), 200) << "try " << i;
  // The newest four are still open: they take their answers once complete.
  for (size_t i = 36; i < slow.size(); ++i) {
    EXPECT_FALSE(ClosedByServer(slow[i])) << i;
    Send(slow[i], "TP/1.1\r\n\r\n");
    EXPECT_EQ(StatusOf(ReadAll(slow[i])), 200) << i;
  }
  for (int fd : slow) close(fd);
}

TEST(HttpServer, AHeadNotSentInTimeIsAnswered408) {
  HttpServer::Options o;
  o.head_timeout = absl::Milliseconds(200);
  auto server = HttpServer::Start("127.0.0.1:0", Pages(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = testing::ConnectLoopback((*server)->port());
  ASSERT_GE(fd, 0);
  Send(fd, "GET / HTTP/1.1\r\n");
  const std::string r = ReadAll(fd);
  close(fd);
  EXPECT_EQ(StatusOf(r), 408) << r;
  EXPECT_TRUE(absl::StrContains(r, "X-Content-Type-Options: nosniff\r\n")) << r;
}

// A client that asks for a large page and reads none of it holds the only
// worker for the send timeout at most; the next client is answered.
TEST(HttpServer, AClientThatDoesNotReadIsDroppedAfterTheSendTimeout) {
  HttpServer::Options o;
  o.workers = 1;
  o.send_timeout = absl::Milliseconds(300);
  auto server = HttpServer::Start("127.0.0.1:0", Pages(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const int stuck = testing::ConnectLoopback(port);
  ASSERT_GE(stuck, 0);
  Send(stuck, "GET /big HTTP/1.1\r\n\r\n");
  const std::string r = Get(port);
  EXPECT_EQ(StatusOf(r), 200) << r.substr(0, 200);
  close(stuck);
}

TEST(HttpServer, EveryAnswerSaysNosniff) {
  auto server = HttpServer::Start("127.0.0.1:0", Pages());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  for (const std::string& target : {"/", "/nowhere"}) {
    const std::string r = Get(port, target);
    EXPECT_TRUE(absl::StrContains(r, "\r\nX-Content-Type-Options: nosniff\r\n")) << r;
  }
  const int fd = testing::ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "BREW / HTTP/1.1\r\n\r\n");
  const std::string r = ReadAll(fd);
  close(fd);
  EXPECT_EQ(StatusOf(r), 405) << r;
  EXPECT_TRUE(absl::StrContains(r, "\r\nX-Content-Type-Options: nosniff\r\n")) << r;
}

}  // namespace
}  // namespace tunefarm::server
