// Every program the ops would build on a device, without the device: each op runs its own
// parameter lookup and candidate code (the functions its plan calls) for a device profile over
// a set of representative shapes, and lists the variants with the exact file, entry point and
// build options the runtime would pass. The offline build gate (tools/kernel_report) compiles
// them with the vendors' offline compilers for GPUs this machine does not have.
#pragma once
#include <string>
#include <vector>

#include "backends/dispatch/variant.hpp"
#include "clattn/context.hpp"

namespace clattn::ops {

// A device as the ops see it: its profile, plus the two figures plans read off the device
// itself (CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT and CL_FP_DENORM of the f32 config).
struct CatalogTarget {
  DeviceProfile profile;
  int preferred_float_width = 1;
  bool fp32_denorms = true;
};

// One call shape of one op: its candidates best first (as select_and_build gets them; a
// candidate with a non-empty why_not does not apply here). `error` is set, and `variants` is
// empty, where the op's plan would throw for this shape on this device.
struct CatalogEntry {
  std::string op, shape;
  std::vector<Variant> variants;
  std::string error;
};

std::vector<CatalogEntry> catalog(const CatalogTarget& target);

// Each op's part (in the op's own file, next to the code it calls).
void catalog_decode(const CatalogTarget& t, std::vector<CatalogEntry>& out);  // with the merge pass
void catalog_extend(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_mla(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_dsa_index(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_linear(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_append_kv(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_rope(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_metadata(const CatalogTarget& t, std::vector<CatalogEntry>& out);
void catalog_hsa(const CatalogTarget& t, std::vector<CatalogEntry>& out);  // selection (sparse decode: catalog_decode)

// Runs `fill` for one shape, turning an Error it throws into an entry with `error` set.
template <class F>
void catalog_add(std::vector<CatalogEntry>& out, const std::string& op, const std::string& shape, F&& fill) {
  CatalogEntry e;
  e.op = op, e.shape = shape;
  try {
    e.variants = fill();
  } catch (const std::exception& x) {
    e.variants.clear();
    e.error = x.what();
  }
  out.push_back(std::move(e));
}

}  // namespace clattn::ops
