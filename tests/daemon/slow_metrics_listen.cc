// LD_PRELOAD shim for daemon_lifecycle_test: kvtierd's metrics-http thread starts
// cpp-httplib's listen_after_bind (a call into libcpp-httplib.so) one second late, as a
// thread of a loaded machine may, so a SIGTERM can arrive before the server runs.
// Not instrumented (no sanitizer flags): it only sleeps and forwards the call.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

namespace httplib {
class Server;
}

// httplib::Server::listen_after_bind(), by its mangled name (the one kvtierd calls).
extern "C" bool _ZN7httplib6Server17listen_after_bindEv(httplib::Server* self) {
  using Fn = bool (*)(httplib::Server*);
  static const Fn real =
      reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "_ZN7httplib6Server17listen_after_bindEv"));
  std::fprintf(stderr, "slow_metrics_listen: listen_after_bind delayed 1 s\n");
  usleep(1000 * 1000);
  return real != nullptr && real(self);
}
