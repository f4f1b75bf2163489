/*
 * capi-codes.h: the codes a chapter's C library returns (its api.h; common/capi.h keeps the
 * message). python/handfused/_lib.py raises ValueError, MemoryError and RuntimeError for them.
 */
#ifndef CAPI_CODES_H
#define CAPI_CODES_H

enum {
    CAPI_OK = 0,
    CAPI_EINVAL = 1, /* a shape past the kernels' limits, a NULL or misaligned pointer */
    CAPI_ENOMEM = 2, /* not enough free device memory for the library conv's one-time setup */
    CAPI_ECUDA = 3,  /* a CUDA error (a launch failed, an earlier kernel faulted, no code for
                        this GPU in the build) */
};

#endif
