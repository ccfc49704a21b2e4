// Dev probe (not part of the build): can an OpenCL program reach Hopper's wgmma by rebuilding
// the driver's own PTX? NVIDIA OpenCL program binaries are PTX text. The source hides each
// sm_90a-only instruction behind a PTX comment marker ("//@"), so the first build (target
// sm_90) succeeds; the probe then takes the PTX, removes the markers, retargets it to sm_90a
// (optionally adds .maxnreg N to every entry), rebuilds it with clCreateProgramWithBinary and
// checks wgmma.mma_async m64n8k16 (B K-major) and m64n16k16 (B transposed) against the CPU for
// several shared-memory descriptor layouts.
//   g++ -std=c++17 dev/nv_wgmma_probe.cpp -o /tmp/nv_wgmma_probe -lOpenCL
//   [MAXNREG=N] /tmp/nv_wgmma_probe
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>
static const char* kSrc = R"CLC(
// A: 64 x 16 f16 row-major (ushort); img: shared-memory image of B (bytes); D: 64 x N f32.
#define WG_BODY(N, NR, TRANS)                                                                   \
  __local uint4 sm[256];                                                                       \
  const int tid = get_local_id(0), w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3; \
  for (int i = tid; i < 256; i += 128) sm[i] = img[i];                                        \
  barrier(CLK_LOCAL_MEM_FENCE);                                                                \
  const int r0 = 16 * w + g;                                                                   \
  __global const uint* A32 = (__global const uint*)A;                                         \
  const uint a0 = A32[(r0 * 16 + 2 * t) / 2], a1 = A32[((r0 + 8) * 16 + 2 * t) / 2];           \
  const uint a2 = A32[(r0 * 16 + 2 * t + 8) / 2], a3 = A32[((r0 + 8) * 16 + 2 * t + 8) / 2];   \
  const ulong addr = (ulong)(uint)(size_t)sm;                                                  \
  const ulong desc = ((addr & 0x3FFFF) >> 4) | ((ulong)(lbo >> 4) << 16) | ((ulong)(sbo >> 4) << 32); \
  float d[NR];                                                                                 \
  for (int i = 0; i < NR; ++i) d[i] = 0.f;                                                     \
  asm volatile("//@fence.proxy.async.shared::cta;" ::: "memory");                              \
  asm volatile("//@wgmma.fence.sync.aligned;" ::: "memory");
// Waits for the wgmma and stores D (64 x N) from the mma.sync-style C fragments.
#define WG_TAIL(N)                                                                               \
  asm volatile("//@wgmma.commit_group.sync.aligned;" ::: "memory");                             \
  asm volatile("//@wgmma.wait_group.sync.aligned 0;" ::: "memory");                             \
  for (int j = 0; j < (N) / 8; ++j) {                                                            \
    D[r0 * (N) + 8 * j + 2 * t] = d[4 * j], D[r0 * (N) + 8 * j + 2 * t + 1] = d[4 * j + 1];       \
    D[(r0 + 8) * (N) + 8 * j + 2 * t] = d[4 * j + 2], D[(r0 + 8) * (N) + 8 * j + 2 * t + 1] = d[4 * j + 3]; \
  }

__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void wg_k(__global const ushort* A, __global const uint4* img,
                                                                     __global float* D, int lbo, int sbo) {
  WG_BODY(8, 4, 0)
  asm volatile("//@{ .reg .pred p; setp.ne.b32 p, %9, 0; wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0; }"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(0) : "memory");
  WG_TAIL(8)
}
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void wg_t(__global const ushort* A, __global const uint4* img,
                                                                     __global float* D, int lbo, int sbo) {
  WG_BODY(16, 8, 1)
  asm volatile("//@{ .reg .pred p; setp.ne.b32 p, %13, 0; wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 1; }"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(0) : "memory");
  WG_TAIL(16)
}
)CLC";

static float h2f(unsigned short h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v = e ? std::ldexp(1.f + m / 1024.f, e - 15) : std::ldexp(m / 1024.f, -14);
  return (h & 0x8000) ? -v : v;
}
static std::string build_log(cl_program p, cl_device_id d) {
  size_t n = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string s(n, 0);
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, &s[0], nullptr);
  return s;
}

int main() {
  cl_uint np = 0;
  clGetPlatformIDs(0, nullptr, &np);
  std::vector<cl_platform_id> ps(np);
  clGetPlatformIDs(np, ps.data(), nullptr);
  cl_platform_id p{};
  for (auto pl : ps) {
    char n[256] = {0};
    clGetPlatformInfo(pl, CL_PLATFORM_NAME, 256, n, nullptr);
    if (strstr(n, "NVIDIA")) p = pl;
  }
  cl_device_id d{};
  clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &d, nullptr);
  cl_int e;
  cl_context ctx = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &e);
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, d, nullptr, &e);
  cl_program p0 = clCreateProgramWithSource(ctx, 1, &kSrc, nullptr, &e);
  e = clBuildProgram(p0, 1, &d, "-cl-nv-verbose", nullptr, nullptr);
  printf("source build %d\n%s\n", e, build_log(p0, d).c_str());
  size_t bs = 0;
  clGetProgramInfo(p0, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, nullptr);
  std::string ptx(bs, 0);
  unsigned char* bp = (unsigned char*)&ptx[0];
  clGetProgramInfo(p0, CL_PROGRAM_BINARIES, sizeof bp, &bp, nullptr);
  ptx = ptx.c_str();
  size_t at = ptx.find("//@");
  printf("PTX %zu bytes; first marker: %s\n", ptx.size(), at == std::string::npos ? "none" : ptx.substr(at, 120).c_str());
  ptx = std::regex_replace(ptx, std::regex("//@"), "");
  ptx = std::regex_replace(ptx, std::regex("\\.target\\s+sm_90\\b"), ".target sm_90a");
  if (getenv("MAXNREG"))
    ptx = std::regex_replace(ptx, std::regex("(\\.entry\\s+\\w+\\s*\\([^)]*\\))"), std::string("$1\n.maxnreg ") + getenv("MAXNREG"));
  {
    size_t v = ptx.find(".target");
    printf("patched header: %s\n", ptx.substr(v, 30).c_str());
  }
  const unsigned char* pb = (const unsigned char*)ptx.c_str();
  size_t pl = ptx.size() + 1;
  cl_int bst = 0;
  cl_program p1 = clCreateProgramWithBinary(ctx, 1, &d, &pl, &pb, &bst, &e);
  printf("create from binary %d (status %d)\n", e, bst);
  e = clBuildProgram(p1, 1, &d, "-cl-nv-verbose", nullptr, nullptr);
  printf("binary build %d\n%s\n", e, build_log(p1, d).c_str());
  if (e != CL_SUCCESS) {
    if (getenv("DUMP")) printf("%s\n", ptx.c_str());
    return 1;
  }

  std::vector<unsigned short> A(64 * 16);
  std::vector<float> Af(A.size());
  srand(1);
  for (size_t i = 0; i < A.size(); ++i) {
    A[i] = (unsigned short)(0x3800 + (rand() % 1024)) ^ (rand() & 1 ? 0x8000 : 0);  // +-[0.5, 1)
    Af[i] = h2f(A[i]);
  }
  cl_mem bA = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, A.size() * 2, A.data(), &e);
  cl_mem bI = clCreateBuffer(ctx, CL_MEM_READ_ONLY, 4096, nullptr, &e);
  cl_mem bD = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * 16 * 4, nullptr, &e);
  for (int kind = 0; kind < 2; ++kind) {
    const int N = kind ? 16 : 8;
    std::vector<unsigned short> B(16 * N);
    std::vector<float> Bf(B.size());
    for (size_t i = 0; i < B.size(); ++i) B[i] = (unsigned short)(0x3800 + (rand() % 1024)), Bf[i] = h2f(B[i]);
    // Image: core matrix (kc, nc) at kc * OK + nc * ON; inside it, K-major (kind 0): row n,
    // 8 k values (16 bytes); transposed (kind 1): row k, 8 n values.
    const int OK = 128, ON = 256;
    std::vector<unsigned short> img(2048, 0);
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < N; ++n) {
        const int base = (k / 8) * OK + (n / 8) * ON;
        const int off = kind == 0 ? base + (n % 8) * 16 + (k % 8) * 2 : base + (k % 8) * 16 + (n % 8) * 2;
        img[off / 2] = B[k * N + n];
      }
    clEnqueueWriteBuffer(q, bI, CL_TRUE, 0, 4096, img.data(), 0, nullptr, nullptr);
    const int combos[4][2] = {{OK, ON}, {ON, OK}, {OK, 1024}, {1024, OK}};
    for (auto& c : combos) {
      cl_kernel k = clCreateKernel(p1, kind ? "wg_t" : "wg_k", &e);
      clSetKernelArg(k, 0, sizeof bA, &bA), clSetKernelArg(k, 1, sizeof bI, &bI), clSetKernelArg(k, 2, sizeof bD, &bD);
      clSetKernelArg(k, 3, sizeof(int), &c[0]), clSetKernelArg(k, 4, sizeof(int), &c[1]);
      size_t gs = 128, ls = 128;
      e = clEnqueueNDRangeKernel(q, k, 1, nullptr, &gs, &ls, 0, nullptr, nullptr);
      std::vector<float> Dv(64 * N);
      cl_int e2 = clEnqueueReadBuffer(q, bD, CL_TRUE, 0, Dv.size() * 4, Dv.data(), 0, nullptr, nullptr);
      double err = 0;
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < N; ++n) {
          double r = 0;
          for (int kk = 0; kk < 16; ++kk) r += double(Af[m * 16 + kk]) * Bf[kk * N + n];
          err = std::fmax(err, std::fabs(r - Dv[m * N + n]));
        }
      printf("%s lbo %d sbo %d: enqueue %d read %d max err %.3g (D[0] %g)\n", kind ? "trans m64n16k16" : "kmajor m64n8k16",
             c[0], c[1], e, e2, err, Dv[0]);
      clReleaseKernel(k);
    }
  }
  return 0;
}
