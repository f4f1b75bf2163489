/*
 * capi-codes.h: the codes a chapter's C library returns (its api.h; common/capi.h keeps the
 * message). python/handfused/_lib.py raises ValueError (EINVAL), MemoryError (ENOMEM) and
 * RuntimeError (ECUDA, ENOTSUP) for them.
 */
#ifndef CAPI_CODES_H
#define CAPI_CODES_H

enum {
    CAPI_OK = 0,
    CAPI_EINVAL = 1, /* a shape past the kernels' limits, a NULL or misaligned pointer */
    CAPI_ENOMEM = 2, /* not enough free device memory for the library conv's one-time setup */
    CAPI_ECUDA = 3,  /* a CUDA error (a launch failed, an earlier kernel faulted, no code for
                        this GPU in the build) */
    CAPI_ENOTSUP = 4, /* this GPU or this build does not run the function's kernels (wgmma:
                         sm_90a code, compute capability 9.0 and a build for it) */
};

#endif
