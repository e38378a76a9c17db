/* What pyprof.nvtx._aten hands pyprof.nvtx._hot, in a capsule: C, so that _hot stays a C
 * extension built without torch. */
#ifndef PYPROF_ATEN_H
#define PYPROF_ATEN_H

#include <Python.h>

#define PYPROF_ATEN_CAPSULE "pyprof.nvtx._aten.api"
#define PYPROF_ATEN_ABI 2  /* raised when the struct below changes */

typedef struct {
    int abi;
    size_t size;  /* sizeof(pyprof_aten_api) where it was built: _hot checks both */
    /* (shape, strides, dtype) of an exact torch.Tensor or nn.Parameter, read from its ATen tensor:
     * equal to the tuple of its Python getters (shape as a plain tuple, equal to torch.Size, and
     * hashed alike but while torch.jit.trace runs, whose torch.Size holds 0-dim tensors: a miss
     * then, never a wrong hit).
     * NULL without an error set: this tensor needs the getters (a non-strided layout, nested,
     * symbolic sizes, a __torch_function__ mode on). */
    PyObject *(*tensor_part)(PyObject *tensor);
    /* 1 while CUDA's or the CPU's autocast is on (all that marker.autocast_region() reads), else 0:
     * torch._C._is_any_autocast_enabled asks every device through a binding, 0.1 us a call. */
    int (*autocast_on)(void);
} pyprof_aten_api;

#endif
