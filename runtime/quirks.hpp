// Driver quirks: facts about one driver (platform, device and driver version), each with a
// standalone reproduction in dev/ and what the profile does about it. Capabilities choose
// variants; a quirk only sets a limit or flag that the ops already honour for any device.
#pragma once
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::rt {

struct Quirk {
  const char* name;
  const char* what;   // what breaks, in one line
  const char* repro;  // the standalone program under dev/
  bool (*applies)(const DeviceProfile&);
  void (*apply)(DeviceProfile&);
};

// Every quirk clattn knows.
const std::vector<Quirk>& known_quirks();

// Applies the quirks that match `p` and names them in p.quirks. CLATTN_QUIRKS turns them
// off for tests and reproductions: "off" (none), or a comma-separated list of names each
// prefixed with '-' (that one off); an unknown name is InvalidArgument.
void apply_quirks(DeviceProfile& p, const std::string& setting);

// (major, minor) of a Mesa driver version ("22.3.6", "24.0.0-devel"); {0, 0} when unknown.
std::pair<int, int> mesa_version(const std::string& driver_version);

}  // namespace clattn::rt
