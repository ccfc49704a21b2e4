/* Mesa llvmpipe (rusticl, Clover) stops a work-item's loops after 65535 iterations in all:
 * gallivm gives every shader invocation one loop counter shared by all its loops
 * (LP_MAX_TGSI_LOOP_ITERATIONS in gallivm/lp_bld_limits.h, "Shared between every loop in a
 * TGSI shader"), decremented at each loop's back-edge, and leaves a loop once it reaches
 * zero. The kernel then goes on with wrong values and the API reports success. Seen on
 * rusticl 22.3.6 (Debian 12, llvmpipe LLVM 15.0.6, 256 bits).
 *
 * Build and run (exit status 1 where the driver truncates):
 *   cc dev/llvmpipe_loop_limit.c -o /tmp/llvmpipe_loop_limit -lOpenCL
 *   RUSTICL_ENABLE=llvmpipe /tmp/llvmpipe_loop_limit rusticl
 * On rusticl 22.3.6 it prints, for outer x inner trips of a nested loop:
 *   100 x 100: 10000 of 10000 iterations
 *   1000 x 66: 63609 of 66000 iterations        <- stops near 65535 back-edges in all
 *   1 x 70000: 65535 of 70000 iterations
 * clattn routes around it with the quirk llvmpipe_loop_limit (runtime/quirks.cpp): the
 * profile's loop_trip_limit, which every op's plan keeps each work-item's loop iterations
 * under (docs/portability.md). */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>

static const char* src =
    "__kernel void count(__global int* out, int n_outer, int n_inner) {\n"
    "  int n = 0;\n"
    "  for (int i = 0; i < n_outer; ++i)\n"
    "    for (int j = 0; j < n_inner; ++j) n += 1 + (j & out[1]);\n"
    "  out[0] = n;\n"
    "}\n";

int main(int argc, char** argv) {
  const char* want = argc > 1 ? argv[1] : "rusticl";
  cl_platform_id ps[16];
  cl_uint np = 0;
  clGetPlatformIDs(16, ps, &np);
  for (cl_uint i = 0; i < np; ++i) {
    char name[256] = {0};
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    cl_device_id d;
    if (!strstr(name, want) || clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 1, &d, NULL) != CL_SUCCESS) continue;
    char dev[256] = {0}, drv[64] = {0};
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dev, dev, NULL);
    clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof drv, drv, NULL);
    printf("%s: %s, driver %s\n", name, dev, drv);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (clBuildProgram(prog, 1, &d, "", NULL, NULL) != CL_SUCCESS) return 2;
    cl_kernel k = clCreateKernel(prog, "count", &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 2 * sizeof(int), NULL, &err);
    const int shapes[][2] = {{100, 100}, {1000, 66}, {1, 70000}};
    int bad = 0;
    for (int s = 0; s < 3; ++s) {
      int host[2] = {0, 0};
      clEnqueueWriteBuffer(q, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);
      clSetKernelArg(k, 0, sizeof out, &out);
      clSetKernelArg(k, 1, sizeof(int), &shapes[s][0]);
      clSetKernelArg(k, 2, sizeof(int), &shapes[s][1]);
      const size_t one = 1;
      err = clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL);
      clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);
      const int want_n = shapes[s][0] * shapes[s][1];
      printf("  %d x %d: %d of %d iterations (enqueue %d)%s\n", shapes[s][0], shapes[s][1], host[0], want_n, err,
             host[0] == want_n ? "" : "   <- truncated");
      bad |= host[0] != want_n;
    }
    return bad;
  }
  fprintf(stderr, "no platform named like '%s'\n", want);
  return 2;
}
