#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
// New connections taken per pass of the reader thread, so heads that have
// arrived are read (and their connections no longer closed to make room)
// between batches.
constexpr int kAcceptBatch = 8;

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

std::string ResponseBytes(const HttpResponse& r, bool head_only) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                   "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                   "\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: "
                   "close\r\n\r\n");
  if (!head_only) out += r.body;
  return out;
}

// Sends all of `bytes` on the non-blocking socket `fd` by `deadline`;
// false when the peer did not take them in time or went away.
bool SendAll(int fd, const std::string& bytes, absl::Time deadline,
             const std::atomic<bool>& stop) {
  size_t off = 0;
  while (off < bytes.size()) {
    if (stop) return false;
    const ssize_t w = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, int(std::min<int64_t>(left, 100))) < 0 && errno != EINTR) return false;
  }
  return true;
}

// One attempt to send a short answer on a connection about to be closed.
void SendOnce(int fd, const HttpResponse& r) {
  const std::string bytes = ResponseBytes(r, false);
  ssize_t ignored = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

HttpResponse Text(int status, std::string body) {
  return {status, "text/plain; charset=utf-8", std::move(body)};
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
                                                              Handler handler,
                                                              const Options& options) {
  if (options.max_connections < 1 || options.max_connections_per_peer < 1 || options.workers < 1 ||
      options.head_timeout <= absl::ZeroDuration() ||
      options.send_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "HTTP: connection caps and workers must be at least 1, timeouts above 0");
  }
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
  // Non-blocking: the reader thread takes connections only while there are some.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("--http_listen '", address, "': ", why));
  }
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::move(handler);
  s->options_ = options;
  s->listen_fd_ = fd;
  s->port_ = ntohs(sa.sin_port);
  for (int i = 0; i < options.workers; ++i) {
    s->workers_.emplace_back([p = s.get()] { p->WorkLoop(); });
  }
  s->reader_ = std::thread([p = s.get()] { p->ReadLoop(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stop_.exchange(true)) return;
  if (reader_.joinable()) reader_.join();
  { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its check and its wait
  ready_cv_.notify_all();
  for (std::thread& w : workers_) w.join();
  close(listen_fd_);
}

void HttpServer::Close(int fd, uint32_t peer) {
  close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (--per_peer_[peer] <= 0) per_peer_.erase(peer);
  --open_;
}

void HttpServer::ReadLoop() {
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back(pollfd{p.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) continue;
    // Heads that arrived first, then heads out of time, then new connections.
    const absl::Time now = absl::Now();
    std::deque<Pending> kept;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      if (fds[i + 1].revents != 0 && ReadHead(p) != Head::kWaiting) continue;
      if (now >= p.deadline) {
        SendOnce(p.fd, Text(408, absl::StrCat("the request head did not arrive within ",
                                              absl::FormatDuration(options_.head_timeout), "\n")));
        Close(p.fd, p.peer);
        continue;
      }
      kept.push_back(std::move(p));
    }
    pending_.swap(kept);
    if (fds[0].revents & POLLIN) Accept();
  }
  for (const Pending& p : pending_) Close(p.fd, p.peer);
  pending_.clear();
}

HttpServer::Head HttpServer::ReadHead(Pending& p) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(p.fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Head::kWaiting;
    if (n <= 0) {
      Close(p.fd, p.peer);
      return Head::kClosed;
    }
    const size_t from = p.head.size() < 3 ? 0 : p.head.size() - 3;
    p.head.append(buf, size_t(n));
    const size_t end = p.head.find("\r\n\r\n", from);
    const bool too_long = (end == std::string::npos ? p.head.size() : end) > kMaxHead;
    if (end != std::string::npos || too_long) {
      if (end != std::string::npos) p.head.resize(end);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(Ready{p.fd, p.peer, std::move(p.head), too_long});
      }
      ready_cv_.notify_one();
      return Head::kHandedOn;
    }
  }
}

void HttpServer::Accept() {
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors the listener stays readable: pause instead of
      // spinning on it (the connections open meanwhile go on being read
      // after the pause).
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      return;
    }
    const uint32_t peer = ntohl(sa.sin_addr.s_addr);
    bool peer_full, all_full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = per_peer_.find(peer);
      peer_full = it != per_peer_.end() && it->second >= options_.max_connections_per_peer;
      all_full = open_ >= options_.max_connections;
    }
    if ((peer_full || all_full) && !Evict(peer, peer_full)) {
      SendOnce(fd, Text(503, "too many connections\n"));
      close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++per_peer_[peer];
      ++open_;
    }
    pending_.push_back(Pending{fd, peer, absl::Now() + options_.head_timeout, ""});
  }
}

bool HttpServer::Evict(uint32_t peer, bool peer_full) {
  for (;;) {
    // The oldest connection of `peer`, or of the peer that holds the most.
    size_t victim = pending_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      int most = 0;
      for (size_t i = 0; i < pending_.size(); ++i) {
        const uint32_t of = pending_[i].peer;
        if (peer_full) {
          if (of != peer) continue;
          victim = i;
          break;
        }
        if (per_peer_[of] > most) most = per_peer_[of], victim = i;
      }
    }
    if (victim == pending_.size()) return false;
    // One whose head has arrived meanwhile is handed on, not closed.
    const Head state = ReadHead(pending_[victim]);
    if (state == Head::kWaiting) Close(pending_[victim].fd, pending_[victim].peer);
    pending_.erase(pending_.begin() + ptrdiff_t(victim));
    if (state != Head::kHandedOn) return true;
  }
}

void HttpServer::WorkLoop() {
  for (;;) {
    Ready r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return stop_ || !ready_.empty(); });
      if (ready_.empty()) return;
      r = std::move(ready_.front());
      ready_.pop_front();
    }
    if (!stop_) Answer(r);
    Close(r.fd, r.peer);
  }
}

void HttpServer::Answer(const Ready& r) {
  const absl::Time deadline = absl::Now() + options_.send_timeout;
  if (r.too_long) {
    SendAll(r.fd, ResponseBytes(Text(400, "request head over 16 KiB\n"), false), deadline, stop_);
    return;
  }
  absl::StatusOr<HttpRequest> req = ParseHttpRequest(r.head);
  if (!req.ok()) {
    SendAll(r.fd, ResponseBytes(Text(400, std::string(req.status().message()) + "\n"), false),
            deadline, stop_);
    return;
  }
  if (req->method != "GET" && req->method != "HEAD") {
    SendAll(r.fd, ResponseBytes(Text(405, "only GET and HEAD\n"), false), deadline, stop_);
    return;
  }
  SendAll(r.fd, ResponseBytes(handler_(*req), req->method == "HEAD"),
          absl::Now() + options_.send_timeout, stop_);
}

}  // namespace tunefarm::server
