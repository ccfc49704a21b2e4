/* rusticl (Mesa 22.3.6, llvmpipe) reports CL_KERNEL_LOCAL_MEM_SIZE as twice the __local bytes a
 * kernel declares, and runs kernels past CL_DEVICE_LOCAL_MEM_SIZE all the same (llvmpipe's local
 * memory is heap memory). A kernel that fits is then refused by a library that believes the
 * driver (clattn's extend cpu tile: 21504 declared bytes reported as 43008 of 32768).
 *
 * Build and run (exit status 1 where the figure is not the declared size):
 *   cc dev/rusticl_local_mem_size.c -o /tmp/rusticl_local_mem_size -lOpenCL
 *   RUSTICL_ENABLE=llvmpipe /tmp/rusticl_local_mem_size rusticl
 * On rusticl 22.3.6 it prints:
 *   __local float a[1024]: 4096 bytes declared, CL_KERNEL_LOCAL_MEM_SIZE 8192
 *   __local float a[6000]: 24000 bytes declared, CL_KERNEL_LOCAL_MEM_SIZE 48000
 * clattn reads the figure through the quirk rusticl_local_mem_doubled (runtime/quirks.cpp):
 * DeviceProfile::kernel_local_mem_overcount = 2. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>

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
    char drv[64] = {0};
    clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof drv, drv, NULL);
    printf("%s, driver %s\n", name, drv);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
    const int sizes[] = {1024, 6000};
    int bad = 0;
    for (int s = 0; s < 2; ++s) {
      char src[512];
      snprintf(src, sizeof src,
               "__kernel void k(__global float* o) { __local float a[%d]; a[get_local_id(0)] = o[0];\n"
               "  barrier(CLK_LOCAL_MEM_FENCE); o[get_global_id(0)] = a[%d - 1 - get_local_id(0)]; }\n",
               sizes[s], sizes[s]);
      const char* p = src;
      cl_program prog = clCreateProgramWithSource(ctx, 1, &p, NULL, &err);
      if (clBuildProgram(prog, 1, &d, "", NULL, NULL) != CL_SUCCESS) return 2;
      cl_kernel k = clCreateKernel(prog, "k", &err);
      cl_ulong lm = 0;
      clGetKernelWorkGroupInfo(k, d, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
      printf("  __local float a[%d]: %d bytes declared, CL_KERNEL_LOCAL_MEM_SIZE %llu%s\n", sizes[s], 4 * sizes[s],
             (unsigned long long)lm, lm == (cl_ulong)(4 * sizes[s]) ? "" : "   <- not the declared size");
      bad |= lm != (cl_ulong)(4 * sizes[s]);
      clReleaseKernel(k);
      clReleaseProgram(prog);
    }
    return bad;
  }
  fprintf(stderr, "no platform named like '%s'\n", want);
  return 2;
}
