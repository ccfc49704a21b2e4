/* Two limits of Oclgrind 21.10 (Debian 12), each shown with a minimal program; neither is a
 * fault of the code under test. Build: cc dev/oclgrind_limits.c -o /tmp/ogl -lOpenCL
 *
 * 1. `oclgrind --uninitialized /tmp/ogl freeze`: the plugin cannot execute LLVM's `freeze`
 *    instruction (clang emits it for a division and remainder by the same runtime value).
 *    It prints "OCLGRIND FATAL ERROR ... Unsupported instruction: freeze" and stops the
 *    kernel; the output keeps its initial value (777) while the API reports success. A
 *    clattn output that keeps its sentinel under this plugin (decode's "worst error 777.969")
 *    is this, not the kernel.
 * 2. `oclgrind /tmp/ogl exit`: a program released from an atexit handler (as a static
 *    object's destructor does) aborts with "corrupted double-linked list": the simulator's
 *    own state is gone by then. clattn's test binaries release their shared context when the
 *    tests end, and CLBlast's programs go with the context that used them. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_context ctx;
static cl_program prog;
static void release(void) {
  clReleaseProgram(prog);
  clReleaseContext(ctx);
}

int main(int argc, char** argv) {
  const int at_exit = argc > 1 && strcmp(argv[1], "exit") == 0;
  cl_platform_id p;
  cl_device_id d;
  cl_int err = clGetPlatformIDs(1, &p, NULL);
  if (err == CL_SUCCESS) err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
  if (err != CL_SUCCESS) return fprintf(stderr, "no OpenCL device\n"), 1;
  ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
  const char* src =
      "__kernel void k(__global int* o, int n) { int a = o[get_global_id(0)]; o[get_global_id(0)] = 2 * (a / n) + a % n; }";
  prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
  clBuildProgram(prog, 1, &d, "", NULL, NULL);
  if (at_exit) {
    atexit(release);
    return 0;
  }
  cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &err);
  int host[4] = {777, 777, 777, 777}, n = 1;
  cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err);
  cl_kernel k = clCreateKernel(prog, "k", &err);
  clSetKernelArg(k, 0, sizeof b, &b);
  clSetKernelArg(k, 1, sizeof n, &n);
  size_t g = 4;
  err = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL);
  clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);
  printf("enqueue %d, o[0] = %d (1554 when the kernel ran)\n", err, host[0]);
  clReleaseKernel(k);
  clReleaseMemObject(b);
  clReleaseCommandQueue(q);
  release();
  return 0;
}
