// libFuzzer target: kvtierd's YAML configuration (daemon/src/config.cc).
//
// Input: YAML text. ParseDaemonConfig must return a status for any text (yaml-cpp throws;
// no exception may escape), and Validate() must then run on whatever it returned. The
// first line is also fed to ParseByteSize and IsLocalAddress, which parse operator text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/config.h"
#include "kvstore/byte_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = kvt::daemon::ParseDaemonConfig(text, kvt::daemon::DefaultDaemonConfig());
  if (config.ok()) (void)config->Validate();
  const std::string line = text.substr(0, text.find('\n'));
  auto bytes = kvt::ParseByteSize(line);
  (void)bytes;
  (void)kvt::daemon::IsLocalAddress(line);
  return 0;
}
