/* clattn C ABI: opaque handles, status codes, thread-local last error. Every entry point
 * catches C++ exceptions at the boundary and never aborts. */
#ifndef CLATTN_H
#define CLATTN_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#include "clattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers match clattn::Status. */
typedef enum clattn_status {
  CLATTN_SUCCESS = 0,
  CLATTN_INVALID_ARGUMENT = 1,
  CLATTN_UNSUPPORTED = 2,
  CLATTN_DEVICE_NOT_FOUND = 3,
  CLATTN_BUILD_FAILED = 4,
  CLATTN_OPENCL_ERROR = 5,
  CLATTN_OUT_OF_MEMORY = 6,
  CLATTN_INTERNAL = 7
} clattn_status;

typedef struct clattn_context_s* clattn_context;

/* Library version, e.g. "0.1.0". */
CLATTN_API const char* clattn_version(void);
/* Message of the last failed call on this thread ("" after a success). Valid until the
 * next clattn call on this thread. */
CLATTN_API const char* clattn_last_error(void);
CLATTN_API const char* clattn_status_name(clattn_status s);

/* selector: NULL or "" = $CLATTN_DEVICE / first GPU / first CPU; else index, vendor or
 * name substring. */
CLATTN_API clattn_status clattn_context_create(const char* selector, clattn_context* out);
/* Adopts an engine's objects (retained; released once by clattn_context_release). */
CLATTN_API clattn_status clattn_context_adopt(cl_context ctx, cl_device_id device, cl_command_queue queue,
                                              clattn_context* out);
CLATTN_API void clattn_context_release(clattn_context ctx);
CLATTN_API clattn_status clattn_context_queue(clattn_context ctx, cl_command_queue* out);

/* Device profile as a JSON document (the same keys as clattn-probe --json's "profile").
 * Writes at most `capacity` bytes including the NUL; `*needed` gets the full size. */
CLATTN_API clattn_status clattn_device_profile_json(clattn_context ctx, char* buf, size_t capacity, size_t* needed);
CLATTN_API clattn_status clattn_self_check(clattn_context ctx);

#ifdef __cplusplus
}
#endif
#endif
