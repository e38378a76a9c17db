// A tensor's dtype, sizes and strides for the marker cache's key, read from its ATen tensor.
//
// Through torch's Python getters they cost about 0.3 us per tensor argument of every wrapped call
// (three binding calls, a torch.Size, an argument parser for stride()); read here they are a few
// words written into _hot's key buffer, no Python object made. Built only where torch is importable at build time
// (`pip install --no-build-isolation`), against that torch's headers: pyprof.nvtx.memo uses it
// only when the running torch is the build it was made for (built_for: version and git commit).
#include "_aten.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>

namespace {

int tensor_meta(PyObject *obj, int64_t *out, int cap)
{
    try {
        // Under a __torch_function__ mode the getters of a plain tensor go through it: so does the key.
        if (at::impl::torch_function_mode_enabled())
            return 0;
        // While torch.jit.trace runs, the getters' torch.Size holds 0-dim tensors and the marker
        // says only "Tensor": a key of plain sizes would give that text to the untraced calls too.
        if (torch::jit::tracer::isTracing())
            return 0;
        const at::Tensor &t = THPVariable_Unpack(obj);
        // The getters' answer differs from plain sizes and strides for these (a symbolic size,
        // no strides, a nested or custom-size tensor raising): they ask the getters.
        if (!t.defined() || t.layout() != c10::kStrided || t.is_nested())
            return 0;
        if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides())
            return 0;
        c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
        const int64_t dims = static_cast<int64_t>(sizes.size());
        if (2 + 2 * dims > cap)
            return 0;
        out[0] = static_cast<int64_t>(t.scalar_type());
        out[1] = dims;
        for (int64_t i = 0; i < dims; i++) {
            out[2 + i] = sizes[i];
            out[2 + dims + i] = strides[i];
        }
        return static_cast<int>(2 + 2 * dims);
    } catch (...) {
        // A C++ error of torch's (a size policy that throws): the getters raise it as Python's.
        return 0;
    }
}

int autocast_on()
{
    return at::autocast::is_autocast_enabled(c10::DeviceType::CUDA) || at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
}

pyprof_aten_api api = {PYPROF_ATEN_ABI, sizeof(pyprof_aten_api), tensor_meta, autocast_on};

PyObject *ints(const int64_t *values, int64_t n)
{
    PyObject *t = PyTuple_New(static_cast<Py_ssize_t>(n));
    for (int64_t i = 0; t != nullptr && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == nullptr)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), v);
    }
    return t;
}

PyObject *py_tensor_meta(PyObject *, PyObject *obj)
{
    if (!THPVariable_CheckExact(obj)) {
        PyErr_SetString(PyExc_TypeError, "pyprof._aten.tensor_meta: not a torch.Tensor");
        return nullptr;
    }
    int64_t meta[PYPROF_ATEN_META_MAX];
    const int n = tensor_meta(obj, meta, PYPROF_ATEN_META_MAX);
    if (n == 0)
        Py_RETURN_NONE;
    PyObject *dtype = reinterpret_cast<PyObject *>(torch::getTHPDtype(static_cast<c10::ScalarType>(meta[0])));
    PyObject *shape = ints(meta + 2, meta[1]);
    PyObject *strides = shape ? ints(meta + 2 + meta[1], meta[1]) : nullptr;
    PyObject *r = strides ? PyTuple_Pack(3, shape, strides, dtype) : nullptr;
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return r;
}

PyObject *py_autocast_on(PyObject *, PyObject *)
{
    return PyBool_FromLong(autocast_on());
}

PyMethodDef methods[] = {
    {"autocast_on", py_autocast_on, METH_NOARGS,
     "autocast_on()\n--\n\nWhether CUDA's or the CPU's autocast is on, as the C key asks it."},
    {"tensor_meta", py_tensor_meta, METH_O,
     "tensor_meta(tensor)\n--\n\n(shape, strides, dtype) of a torch.Tensor as the C key reads them from "
     "ATen, or None where it needs torch's getters."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyprof.nvtx._aten",
    "Tensor metadata for the marker cache's key, read from ATen (pyprof.nvtx.memo uses it through _hot).",
    -1, methods,
};

}  // namespace

PyMODINIT_FUNC PyInit__aten(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == nullptr)
        return nullptr;
    PyObject *capsule = PyCapsule_New(&api, PYPROF_ATEN_CAPSULE, nullptr);
    if (capsule == nullptr || PyModule_AddStringConstant(m, "built_for", PYPROF_BUILT_FOR) < 0 ||
        PyModule_AddObject(m, "api", capsule) < 0) {  // steals capsule on success only
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
