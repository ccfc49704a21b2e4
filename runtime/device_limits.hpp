// Constrained-device runs: a spec such as "local=16384,wg=64,kernel_wg=32,fp16=0" makes the
// profile (and so every op's tile choice and the post-build checks) act as if the device had
// at most these limits, so one machine covers Mali-, Adreno- and iGPU-shaped devices
// (docs/portability.md lists the keys and the shapes CI runs).
#pragma once
#include <string>

#include "clattn/context.hpp"

namespace clattn::rt {

// Lowers `p` to the limits of `spec` (keys: local, wg, kernel_wg, private, fp16, subgroups,
// loop_trips, cus); never raises a figure above the device's. `from` names the source in
// messages (CLATTN_DEVICE_LIMITS, options.device_limits). An unknown key, a value that is
// not a non-negative integer or a flag other than 0/1 is InvalidArgument naming the key.
void apply_device_limits(DeviceProfile& p, const std::string& spec, const std::string& from);

// The compiled kernel's limits as the ops must take them: the driver's figure, lowered to the
// profile's caps (DeviceProfile::kernel_work_group_cap, max_work_group_size).
std::size_t kernel_work_group_limit(const DeviceProfile& p, std::size_t driver_figure);

}  // namespace clattn::rt
