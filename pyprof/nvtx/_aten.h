/* What pyprof.nvtx._aten hands pyprof.nvtx._hot, in a capsule: C, so that _hot stays a C
 * extension built without torch. */
#ifndef PYPROF_ATEN_H
#define PYPROF_ATEN_H

#include <Python.h>

#define PYPROF_ATEN_CAPSULE "pyprof.nvtx._aten.api"
#define PYPROF_ATEN_ABI 3  /* raised when the struct below changes */
/* int64 words tensor_meta may write: dtype, dimensions, sizes and strides of up to 30 dimensions */
#define PYPROF_ATEN_META_MAX 62

typedef struct {
    int abi;
    size_t size;  /* sizeof(pyprof_aten_api) where it was built: _hot checks both */
    /* An exact torch.Tensor's or nn.Parameter's dtype (c10::ScalarType), number of dimensions,
     * sizes and strides, read from its ATen tensor into out[0..cap): the number of words written,
     * 2 + 2 * dimensions. 0, with no error set, for a tensor that needs torch's getters (a
     * non-strided layout, nested, symbolic sizes, a __torch_function__ mode on, torch.jit.trace
     * running, more dimensions than cap holds). */
    int (*tensor_meta)(PyObject *tensor, int64_t *out, int cap);
    /* 1 while CUDA's or the CPU's autocast is on (all that marker.autocast_region() reads), else 0:
     * torch._C._is_any_autocast_enabled asks every device through a binding, 0.1 us a call. */
    int (*autocast_on)(void);
} pyprof_aten_api;

#endif
