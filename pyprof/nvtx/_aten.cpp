// A tensor's (shape, strides, dtype) for the marker cache's key, read from its ATen tensor.
//
// Through torch's Python getters that triple costs about 0.3 us per tensor argument of every
// wrapped call (three binding calls, a torch.Size, an argument parser for stride()); read here
// it is two small tuples. Built only where torch is importable at build time
// (`pip install --no-build-isolation`), against that torch's headers: pyprof.nvtx.memo uses it
// only when the running torch is the build it was made for (built_for: version and git commit).
#include "_aten.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>

namespace {

PyObject *ints(c10::IntArrayRef values)
{
    PyObject *t = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
    if (t == nullptr)
        return nullptr;
    for (size_t i = 0; i < values.size(); i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == nullptr) {
            Py_DECREF(t);
            return nullptr;
        }
        PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), v);
    }
    return t;
}

PyObject *tensor_part(PyObject *obj)
{
    try {
        // Under a __torch_function__ mode the getters of a plain tensor go through it: so does the key.
        if (at::impl::torch_function_mode_enabled())
            return nullptr;
        const at::Tensor &t = THPVariable_Unpack(obj);
        // The getters' answer differs from plain sizes and strides for these (a symbolic size,
        // no strides, a nested or custom-size tensor raising): they ask the getters.
        if (!t.defined() || t.layout() != c10::kStrided || t.is_nested())
            return nullptr;
        const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
        if (impl->has_symbolic_sizes_strides())
            return nullptr;
        // Everything that may throw before any Python object is made: nothing to free on the way out.
        c10::IntArrayRef sizes = t.sizes(), strides_ = t.strides();
        PyObject *dtype = reinterpret_cast<PyObject *>(torch::getTHPDtype(t.scalar_type()));
        PyObject *shape = ints(sizes);
        PyObject *strides = shape ? ints(strides_) : nullptr;
        PyObject *part = strides ? PyTuple_Pack(3, shape, strides, dtype) : nullptr;
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return part;
    } catch (...) {
        // A C++ error of torch's (a size policy that throws): the getters raise it as Python's.
        return nullptr;
    }
}

int autocast_on()
{
    return at::autocast::is_autocast_enabled(c10::DeviceType::CUDA) || at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
}

pyprof_aten_api api = {PYPROF_ATEN_ABI, sizeof(pyprof_aten_api), tensor_part, autocast_on};

PyObject *py_tensor_part(PyObject *, PyObject *obj)
{
    if (!THPVariable_CheckExact(obj)) {
        PyErr_SetString(PyExc_TypeError, "pyprof._aten.tensor_part: not a torch.Tensor");
        return nullptr;
    }
    PyObject *part = tensor_part(obj);
    if (part == nullptr && !PyErr_Occurred())
        Py_RETURN_NONE;
    return part;
}

PyObject *py_autocast_on(PyObject *, PyObject *)
{
    return PyBool_FromLong(autocast_on());
}

PyMethodDef methods[] = {
    {"autocast_on", py_autocast_on, METH_NOARGS,
     "autocast_on()\n--\n\nWhether CUDA's or the CPU's autocast is on, as the C key asks it."},
    {"tensor_part", py_tensor_part, METH_O,
     "tensor_part(tensor)\n--\n\n(shape, strides, dtype) of a torch.Tensor as the marker cache's key "
     "holds them, or None where it needs torch's getters."},
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
