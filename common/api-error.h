/*
 * api-error.h: how the chapters' C libraries (their api.cu) report an error: a code returned
 * and a message kept for the calling thread, never an exit.
 *
 *   api_fail(code, fmt, ...)  keeps the message (printf's format) and returns code
 *   api_cuda(code, what)      the launches so far (cudaGetLastError): 0 when they succeeded,
 *                             else code, the message "what: CUDA error: <CUDA's string>" kept
 *   api_last_error()          the calling thread's last message ("" if none)
 * The functions are static: each library has its own message buffer.
 */
#ifndef API_ERROR_H
#define API_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include <cuda_runtime.h>

static thread_local char api_message[512];

static inline const char *api_last_error(void) { return api_message; }

static inline int api_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(api_message, sizeof api_message, fmt, ap);
    va_end(ap);
    return code;
}

static inline int api_cuda(int code, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : api_fail(code, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

#endif
