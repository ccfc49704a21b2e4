/* Kernels with the faults the Oclgrind gate looks for (an out-of-bounds write, a write-write
 * race between work-items, a local-memory read-write race without a barrier): run under
 * `oclgrind --check-api --data-races`, each must be reported, or the gate proves nothing. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>

static const char* kSource =
    "__kernel void out_of_bounds(__global int* o) { o[get_global_id(0) + 1] = 1; }\n"
    "__kernel void global_race(__global int* o) { o[0] = (int)get_global_id(0); }\n"
    "__kernel void local_race(__global int* o) {\n"
    "  __local int s[8];\n"
    "  s[get_local_id(0)] = (int)get_local_id(0);\n"
    "  o[get_global_id(0)] = s[(get_local_id(0) + 1) % 8];\n"
    "}\n";

int main(void) {
  cl_platform_id p;
  cl_device_id d;
  cl_int err = clGetPlatformIDs(1, &p, NULL);
  if (err == CL_SUCCESS) err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "detector_check: no OpenCL device (%d)\n", err);
    return 1;
  }
  cl_context c = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(c, d, 0, &err);
  cl_program prog = clCreateProgramWithSource(c, 1, &kSource, NULL, &err);
  if (clBuildProgram(prog, 1, &d, "", NULL, NULL) != CL_SUCCESS) {
    fprintf(stderr, "detector_check: build failed\n");
    return 1;
  }
  cl_mem b = clCreateBuffer(c, CL_MEM_READ_WRITE, 16 * sizeof(int), NULL, &err);
  const char* names[] = {"out_of_bounds", "global_race", "local_race"};
  for (int i = 0; i < 3; ++i) {
    cl_kernel k = clCreateKernel(prog, names[i], &err);
    clSetKernelArg(k, 0, sizeof b, &b);
    size_t global = 16, local = 8;
    clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
    clFinish(q);
    clReleaseKernel(k);
  }
  clReleaseMemObject(b);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
  printf("detector_check: 3 faulty kernels ran\n");
  return 0;
}
