#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tunefarm::server {
namespace {

constexpr size_t kMaxHead = 16 << 10;
constexpr int kMaxConnections = 32;
constexpr absl::Duration kReadTimeout = absl::Seconds(10);

std::string Decode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && absl::ascii_isxdigit(s[i + 1]) &&
               absl::ascii_isxdigit(s[i + 2])) {
      int v = 0;
      absl::SimpleHexAtoi(s.substr(i + 1, 2), &v);
      out += char(v);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

void WriteAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += size_t(w);
  }
}

void Respond(int fd, const HttpResponse& r, bool head_only) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                   "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                   "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
  if (!head_only) out += r.body;
  WriteAll(fd, out);
}

}  // namespace

absl::StatusOr<HttpRequest> ParseHttpRequest(const std::string& head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (lines.empty()) return absl::InvalidArgumentError("empty request");
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || !absl::StartsWith(first[2], "HTTP/1.")) {
    return absl::InvalidArgumentError("the request line is not METHOD TARGET HTTP/1.x");
  }
  HttpRequest r;
  r.method = std::string(first[0]);
  absl::string_view target = first[1];
  if (target.empty() || target[0] != '/') {
    return absl::InvalidArgumentError("the request target is not a path");
  }
  const size_t q = target.find('?');
  r.path = Decode(target.substr(0, q));
  if (q != absl::string_view::npos) {
    for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      r.query[Decode(kv.substr(0, eq))] =
          eq == absl::string_view::npos ? "" : Decode(kv.substr(eq + 1));
    }
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError("a header line has no name");
    }
    r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http_listen '", address, "': not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty()) host = "0.0.0.0";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen '", address, "': the host is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, 64) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("--http_listen '", address, "': ", why));
  }
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::move(handler);
  s->listen_fd_ = fd;
  s->port_ = ntohs(sa.sin_port);
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stop_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return active_ == 0; });
}

void HttpServer::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (active_ >= kMaxConnections) {
        Respond(fd, {503, "text/plain; charset=utf-8", "too many connections\n"}, false);
        close(fd);
        continue;
      }
      ++active_;
    }
    std::thread([this, fd] {
      Serve(fd);
      close(fd);
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) idle_.notify_all();
    }).detach();
  }
}

void HttpServer::Serve(int fd) {
  std::string head;
  const absl::Time deadline = absl::Now() + kReadTimeout;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead) {
      return Respond(fd, {400, "text/plain; charset=utf-8", "request head over 16 KiB\n"}, false);
    }
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || stop_ || poll(&p, 1, int(std::min<int64_t>(left, 200))) < 0) return;
    if (!(p.revents & POLLIN)) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    head.append(buf, size_t(n));
  }
  absl::StatusOr<HttpRequest> req = ParseHttpRequest(head.substr(0, head.find("\r\n\r\n")));
  if (!req.ok()) {
    return Respond(
        fd, {400, "text/plain; charset=utf-8", std::string(req.status().message()) + "\n"}, false);
  }
  if (req->method != "GET" && req->method != "HEAD") {
    return Respond(fd, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
  }
  Respond(fd, handler_(*req), req->method == "HEAD");
}

}  // namespace tunefarm::server
