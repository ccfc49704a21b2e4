// Dev probe (not part of the build): which Hopper PTX features NVIDIA's OpenCL takes in inline
// PTX. Builds one kernel that copies 1152 bytes global -> local with cp.async.bulk completed
// on an mbarrier (expect_tx), prints the build log, the PTX header (.version / .target) and
// whether the copy is exact; -DWGMMA adds wgmma.fence/commit/wait.
//   g++ -std=c++17 dev/nv_ptx_probe.cpp -o /tmp/nv_ptx_probe -lOpenCL
//   PROBE_OPTS="-cl-nv-verbose -cl-nv-arch sm_90a -DWGMMA" /tmp/nv_ptx_probe
// H100, driver 580.159.04: the bulk copy is exact (PTX .version 9.0, ptxas "for sm_90a"); wgmma
// is rejected ("not supported on .target 'sm_90'") with and without -cl-nv-arch sm_90a.
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
static const char* kSrc = R"CLC(
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void tma(__global const uint* src, __global uint* dst, int mode) {
  __local uint4 buf[80];
  __local ulong mbar[1];
  const uint mb = (uint)(size_t)mbar, b = (uint)(size_t)buf;
  const int lid = get_local_id(0);
  if (lid == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(mb) : "memory");
    if (mode) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(mb), "r"(1152) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(b + 16), "l"((ulong)(size_t)(src + 64)), "r"(1152), "r"(mb) : "memory");
  }
  asm volatile("{ .reg .pred P1; WAIT_%=: mbarrier.try_wait.parity.shared.b64 P1, [%0], %1; @!P1 bra WAIT_%=; }" :: "r"(mb), "r"(0) : "memory");
  for (int i = lid; i < 288; i += 128) dst[i] = ((__local uint*)buf)[4 + i];
#ifdef WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
)CLC";
int main() {
  cl_uint np = 0; clGetPlatformIDs(0, nullptr, &np);
  std::vector<cl_platform_id> ps(np); clGetPlatformIDs(np, ps.data(), nullptr);
  cl_device_id d{}; cl_platform_id p{};
  for (auto pl : ps) { char n[256] = {0}; clGetPlatformInfo(pl, CL_PLATFORM_NAME, 256, n, nullptr); if (strstr(n, "NVIDIA")) { p = pl; break; } }
  clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &d, nullptr);
  cl_int e; cl_context ctx = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &e);
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, d, nullptr, &e);
  cl_program pr = clCreateProgramWithSource(ctx, 1, &kSrc, nullptr, &e);
  const char* opts = getenv("PROBE_OPTS") ? getenv("PROBE_OPTS") : "-cl-nv-verbose";
  e = clBuildProgram(pr, 1, &d, opts, nullptr, nullptr);
  size_t ls = 0; clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &ls);
  std::string log(ls, 0); clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, ls, &log[0], nullptr);
  printf("build %d log:\n%s\n", e, log.c_str());
  size_t bs = 0; clGetProgramInfo(pr, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, nullptr);
  if (bs) { std::vector<unsigned char> bin(bs); unsigned char* bp = bin.data(); clGetProgramInfo(pr, CL_PROGRAM_BINARIES, sizeof bp, &bp, nullptr);
    std::string t(bin.begin(), bin.end()); size_t v = t.find(".version"); printf("PTX header: %s\n", v == std::string::npos ? "?" : t.substr(v, 40).c_str()); }
  if (e != CL_SUCCESS) return 1;
  std::vector<cl_uint> h(400); for (size_t i = 0; i < h.size(); ++i) h[i] = 0x1000u + i;
  cl_mem s = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 1600, h.data(), &e);
  cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1152, nullptr, &e);
  for (int mode = 0; mode < 2; ++mode) {
    cl_kernel k = clCreateKernel(pr, "tma", &e);
    clSetKernelArg(k, 0, sizeof s, &s); clSetKernelArg(k, 1, sizeof o, &o); clSetKernelArg(k, 2, sizeof mode, &mode);
    size_t g = 128, l = 128; e = clEnqueueNDRangeKernel(q, k, 1, nullptr, &g, &l, 0, nullptr, nullptr);
    std::vector<cl_uint> r(288, 0); cl_int e2 = clEnqueueReadBuffer(q, o, CL_TRUE, 0, 1152, r.data(), 0, nullptr, nullptr);
    int bad = 0; for (int i = 0; i < 288; ++i) bad += r[i] != 0x1000u + 64 + i;
    printf("mode %d: enqueue %d read %d, %d of 288 words wrong (r[0]=%x)\n", mode, e, e2, bad, r[0]);
  }
  return 0;
}
