// A small HTTP/1.1 server for what the tuning server shows on the web: the
// metrics (Prometheus' text format) and the dashboard. GET and HEAD only,
// one request per connection (Connection: close), request heads of at most
// 16 KiB.
//
// No one client can deny the pages to others (Options): one thread reads
// every request head without blocking, so a connection that sends its head
// slowly holds a socket, not a thread; a head must arrive within
// head_timeout; one peer address may hold max_connections_per_peer
// connections and all peers max_connections. A new connection past either
// cap takes the place of the oldest connection still sending its head (of
// the same peer, or of the peer holding the most; one whose head has
// arrived is answered, never closed), so clients that send their request at
// once are served while slow ones give way; only when every connection has
// sent its head is the new one answered 503. Complete
// requests are answered by `workers` threads, each response within
// send_timeout. Every response carries X-Content-Type-Options: nosniff.
// Stop() closes the listener and every connection and joins the threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

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

  struct Options {
    int max_connections = 128;                        // open at once, heads being read included
    int max_connections_per_peer = 32;                // open at once from one IPv4 address
    absl::Duration head_timeout = absl::Seconds(3);   // to send the whole request head
    absl::Duration send_timeout = absl::Seconds(10);  // to take the whole response
    int workers = 4;                                  // threads that run the handler
  };

  // Listens on `address` (HOST:PORT, an IPv4 address or localhost; port 0:
  // any) and serves `handler` until Stop. InvalidArgument for a bad address
  // or options.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler, const Options& options);
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler) {
    return Start(address, std::move(handler), Options());
  }
  ~HttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  // A connection whose request head is still arriving (the reader thread's).
  struct Pending {
    int fd;
    uint32_t peer;
    absl::Time deadline;
    std::string head;
  };
  // A connection with its whole head (or too much of one), for a worker.
  struct Ready {
    int fd;
    uint32_t peer;
    std::string head;
    bool too_long;
  };

  enum class Head { kWaiting, kHandedOn, kClosed };

  HttpServer() = default;
  void ReadLoop();
  // Reads what `p` has sent: its head is still to come, or it is handed on
  // to the workers (whole or too long), or the peer went away (closed).
  Head ReadHead(Pending& p);
  void Accept();
  // Makes room for a connection from `peer` by closing the oldest
  // connection still sending its head (of `peer` when `peer_full`, else of
  // the peer holding the most); one whose head has arrived meanwhile is
  // handed on instead. False when none is left to close.
  bool Evict(uint32_t peer, bool peer_full);
  void Close(int fd, uint32_t peer);
  void WorkLoop();
  void Answer(const Ready& r);

  Handler handler_;
  Options options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::vector<std::thread> workers_;
  std::deque<Pending> pending_;  // oldest first; the reader thread's only

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::deque<Ready> ready_;           // under mu_
  std::map<uint32_t, int> per_peer_;  // open connections by peer, under mu_
  int open_ = 0;                      // open connections, under mu_
};

// Parses one request head ("GET /path?a=b HTTP/1.1\r\nName: value\r\n...");
// an error names what is wrong with it.
absl::StatusOr<HttpRequest> ParseHttpRequest(const std::string& head);

}  // namespace tunefarm::server
