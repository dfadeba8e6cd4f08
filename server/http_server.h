// A small HTTP/1.1 server for what the tuning server shows on the web: the
// metrics (Prometheus' text format) and, later, the dashboard. GET and HEAD
// only, one request per connection (Connection: close), requests of at most
// 16 KiB read within 10 s, at most 32 connections served at once (more are
// answered 503). Each connection is served on a thread of its own; Stop()
// closes the listener and waits for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace tunefarm::server {

struct HttpRequest {
  std::string method;                          // GET or HEAD
  std::string path;                            // without the query
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-cased
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Listens on `address` (HOST:PORT, an IPv4 address or localhost; port 0:
  // any) and serves `handler` until Stop.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler);
  ~HttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  HttpServer() = default;
  void AcceptLoop();
  void Serve(int fd);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // connections being served (detached threads), under mu_
};

// Parses one request head ("GET /path?a=b HTTP/1.1\r\nName: value\r\n...");
// an error names what is wrong with it.
absl::StatusOr<HttpRequest> ParseHttpRequest(const std::string& head);

}  // namespace tunefarm::server
