/* The marker cache's hit path in C: pyprof.nvtx.memo.lookup without the interpreter.
 *
 * A wrapped call in steady state needs only the key of its call (call site, module, autocast
 * dtype, a description per argument) and one dict look-up; written in Python that is most of the
 * cost pyprof adds to a call (the key's bytecode, a frame object per frame walked). This module
 * computes the very same key tuple as memo.key, so the Python miss path (memo.marker) stores
 * entries this one finds, and finds the entries it stores. An Exception in making the key is
 * cleared and reported as a miss, as memo._lookup does: the Python path then does the same work
 * and raises or recovers as it always did; KeyboardInterrupt and SystemExit go on up.
 *
 * setup() hands over memo's tables and helpers once; nothing here imports torch. A tensor's part
 * of the key is read from ATen where pyprof.nvtx._aten was built for the running torch (its
 * capsule, handed over by setup()), else through torch's Python getters; so is whether autocast is on.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include "_aten.h"

static PyObject *code_prefix;     /* site.code_prefix: id(code) -> (code, site prefix or "") */
static PyObject *classify;        /* site.classify(code) -> that entry, stored */
static PyObject *tuple_texts;     /* marker.tuple_texts: id(tuple) -> (tuple, text) */
static PyObject *encode;          /* marker.encode(value) -> JSON text */
static PyObject *any_autocast;    /* () -> bool, False outside every autocast region */
static PyObject *autocast_region; /* () -> ',"autocast":"<dtype>"' or "" */
static PyObject *tensor_type, *parameter_type;
static PyObject *s_shape, *s_stride, *s_dtype, *s_hex, *s_empty, *zero, *one;
static PyObject *getframe;         /* sys._getframe */
static PyObject *none_part, *true_part, *false_part;  /* (type(None), None), (bool, True), (bool, False) */
static const pyprof_aten_api *aten; /* pyprof.nvtx._aten's, or NULL */
static PyObject *aten_capsule;     /* holds it (or None) */
#define SEEN_SLOTS 64
static PyObject *seen_code[SEEN_SLOTS];  /* code objects classified lately, held (is_user) */
static int seen_user[SEEN_SLOTS];

/* 1 when code object c is the user's (site.classify gives it a site prefix), 0 when torch's or
 * pyprof's, -1 on error. A small table by address in front of code_prefix: reading that dict
 * costs a new int per frame, and the frames a walk meets are few and the same call after call. */
static int is_user(PyObject *c)
{
    size_t slot = ((size_t)c >> 4) % SEEN_SLOTS;
    if (seen_code[slot] == c)
        return seen_user[slot];
    PyObject *id = PyLong_FromVoidPtr(c);
    if (id == NULL)
        return -1;
    PyObject *e = PyDict_GetItemWithError(code_prefix, id);
    Py_DECREF(id);
    if (e != NULL)
        Py_INCREF(e);
    else if (!PyErr_Occurred())
        e = PyObject_CallOneArg(classify, c);
    if (e == NULL || !PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(e, 1))) {
        Py_XDECREF(e);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "pyprof: malformed call-site cache entry");
        return -1;
    }
    int user = PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(e, 1)) != 0;
    Py_DECREF(e);
    /* Held, so that the address is not another code object's while the slot names it. The old
     * one goes last: freeing it may run Python code (a weakref callback) that uses the table. */
    PyObject *old = seen_code[slot];
    Py_INCREF(c);
    seen_code[slot] = c;
    seen_user[slot] = user;
    Py_XDECREF(old);
    return user;
}

/* The first user frame above the caller's caller (the wrapper's caller): its code object (new
 * reference) and instruction offset in *code / *lasti; *code stays NULL when every frame is
 * torch's or pyprof's. -1 on error. */
static int user_site(PyObject **code, int *lasti)
{
    /* sys._getframe(1), not PyEval_GetFrame(): the wrapper's own frame object need not be made
     * (the caller's usually exists already: it lives on while the caller runs). */
    *code = NULL;
    PyFrameObject *f = (PyFrameObject *)PyObject_CallOneArg(getframe, one);
    if (f == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))  /* "call stack is not deep enough" */
            return -1;
        PyErr_Clear();
        return 0;
    }
    while (f != NULL) {
        PyObject *c = (PyObject *)PyFrame_GetCode(f);
        int user = is_user(c);
        if (user < 0) {
            Py_DECREF(c);
            Py_DECREF(f);
            return -1;
        }
        if (user) {
#if PY_VERSION_HEX >= 0x030B0000
            *lasti = PyFrame_GetLasti(f);
#else
            /* f_lasti's unit changed in 3.10: the attribute is what memo.key reads. */
            PyObject *at = PyObject_GetAttrString((PyObject *)f, "f_lasti");
            *lasti = at ? (int)PyLong_AsLong(at) : -1;
            Py_XDECREF(at);
            if (PyErr_Occurred()) {
                Py_DECREF(c);
                Py_DECREF(f);
                return -1;
            }
#endif
            *code = c;
            Py_DECREF(f);
            return 0;
        }
        Py_DECREF(c);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return 0;
}

/* One argument's part of the key (memo._part). */
static PyObject *part(PyObject *a)
{
    PyObject *t = (PyObject *)Py_TYPE(a);
    if (t == tensor_type || t == parameter_type) {
        if (aten != NULL) {
            PyObject *r = aten->tensor_part(a);
            if (r != NULL || PyErr_Occurred())
                return r;
        }
        PyObject *shape = PyObject_GetAttr(a, s_shape);
        PyObject *stride = shape ? PyObject_CallMethodNoArgs(a, s_stride) : NULL;
        PyObject *dtype = stride ? PyObject_GetAttr(a, s_dtype) : NULL;
        PyObject *r = dtype ? PyTuple_Pack(3, shape, stride, dtype) : NULL;
        Py_XDECREF(shape);
        Py_XDECREF(stride);
        Py_XDECREF(dtype);
        return r;
    }
    /* (type, value), made once for the three singletons */
    PyObject *known = a == Py_None ? none_part : a == Py_True ? true_part : a == Py_False ? false_part : NULL;
    if (known != NULL) {
        Py_INCREF(known);
        return known;
    }
    if (t == (PyObject *)&PyLong_Type || t == (PyObject *)&PyUnicode_Type)
        return PyTuple_Pack(2, t, a);
    if (t == (PyObject *)&PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(a);
        if (d != 0.0 && d == d) {
            Py_INCREF(a);
            return a;
        }
        return PyObject_CallMethodNoArgs(a, s_hex);
    }
    if (t == (PyObject *)&PyTuple_Type) {
        PyObject *id = PyLong_FromVoidPtr(a);
        if (id == NULL)
            return NULL;
        PyObject *hit = PyDict_GetItemWithError(tuple_texts, id);
        Py_DECREF(id);
        if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2 && PyTuple_GET_ITEM(hit, 0) == a) {
            PyObject *text = PyTuple_GET_ITEM(hit, 1);
            Py_INCREF(text);
            return text;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_CallOneArg(encode, a);
}

static PyObject *autocast_part(void)
{
    int truth;
    if (aten != NULL) {
        truth = aten->autocast_on();
    } else {
        PyObject *on = PyObject_CallNoArgs(any_autocast);
        if (on == NULL)
            return NULL;
        truth = PyObject_IsTrue(on);
        Py_DECREF(on);
        if (truth < 0)
            return NULL;
    }
    if (!truth) {
        Py_INCREF(s_empty);
        return s_empty;
    }
    return PyObject_CallNoArgs(autocast_region);
}

/* The key of a call made by the caller's caller (memo.key). */
static PyObject *call_key(PyObject *args, PyObject *kwargs, PyObject *mod)
{
    if (code_prefix == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof._hot: setup() was not called");
        return NULL;
    }
    if (!PyTuple_CheckExact(args) || (kwargs != Py_None && !PyDict_CheckExact(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot: args must be a tuple, kwargs a dict");
        return NULL;
    }
    PyObject *code;
    int lasti = 0;
    if (user_site(&code, &lasti) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    Py_ssize_t nk = kwargs != Py_None ? PyDict_GET_SIZE(kwargs) : 0;
    PyObject *key = PyTuple_New(4 + n + (nk ? 1 + 2 * nk : 0));
    if (key == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    PyObject *site_id, *site_at;
    if (code != NULL) {
        site_id = PyLong_FromVoidPtr(code);
        site_at = PyLong_FromLong(lasti);
        Py_DECREF(code);
    } else {
        site_id = zero;
        site_at = zero;
        Py_INCREF(zero);
        Py_INCREF(zero);
    }
    PyTuple_SET_ITEM(key, 0, site_id);
    PyTuple_SET_ITEM(key, 1, site_at);
    Py_INCREF(mod);
    PyTuple_SET_ITEM(key, 2, mod);
    if (site_id == NULL || site_at == NULL)
        goto fail;
    PyObject *autocast = autocast_part();
    if (autocast == NULL)
        goto fail;
    PyTuple_SET_ITEM(key, 3, autocast);
    Py_ssize_t i = 4;
    for (Py_ssize_t j = 0; j < n; j++, i++) {
        PyObject *p = part(PyTuple_GET_ITEM(args, j));
        if (p == NULL)
            goto fail;
        PyTuple_SET_ITEM(key, i, p);
    }
    if (nk) {
        Py_INCREF(Py_None);  /* memo._KWARGS */
        PyTuple_SET_ITEM(key, i++, Py_None);
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            if (i + 2 > PyTuple_GET_SIZE(key)) {
                PyErr_SetString(PyExc_RuntimeError, "pyprof._hot: kwargs changed size");
                goto fail;
            }
            /* part() may run Python code (a getter, encode()) that changes the dict: hold k and
             * v while it runs, and check the size once the walk is done. */
            Py_INCREF(k);
            PyTuple_SET_ITEM(key, i++, k);
            Py_INCREF(v);
            PyObject *p = part(v);
            Py_DECREF(v);
            if (p == NULL)
                goto fail;
            PyTuple_SET_ITEM(key, i++, p);
        }
        if (i != PyTuple_GET_SIZE(key) || PyDict_GET_SIZE(kwargs) != nk) {
            PyErr_SetString(PyExc_RuntimeError, "pyprof._hot: kwargs changed size");
            goto fail;
        }
    }
    return key;
fail:
    Py_DECREF(key);  /* unset slots are NULL: tuple dealloc skips them */
    return NULL;
}

static int arity(PyObject *const *a, Py_ssize_t n, Py_ssize_t want, const char *name)
{
    if (n != want) {
        PyErr_Format(PyExc_TypeError, "pyprof._hot.%s takes %zd arguments (%zd given)", name, want, n);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(key_doc, "key(args, kwargs, mod)\n--\n\n"
"The marker-cache key of a call made by the caller's caller, exactly as pyprof.nvtx.memo.key.");

static PyObject *hot_key(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, 3, "key") < 0)
        return NULL;
    return call_key(a[0], a[1], a[2]);
}

PyDoc_STRVAR(lookup_doc, "lookup(cache, args, kwargs, mod)\n--\n\n"
"The marker text cached in `cache` for this call of the caller's caller, or None: a miss, or\n"
"anything that failed (the Python path, memo.marker, then does the same work itself).");

static PyObject *hot_lookup(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, 4, "lookup") < 0)
        return NULL;
    if (!PyDict_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot.lookup: cache must be a dict");
        return NULL;
    }
    PyObject *key = call_key(a[1], a[2], a[3]);
    if (key != NULL) {
        PyObject *hit = PyDict_GetItemWithError(a[0], key);
        PyObject *text = NULL;
        /* Held before the key goes: freeing the key may run Python code (a __del__) that
         * changes the cache. */
        if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2) {
            text = PyTuple_GET_ITEM(hit, 0);
            Py_INCREF(text);
        }
        Py_DECREF(key);
        if (text != NULL)
            return text;
    }
    /* A miss, or an Exception in making the key (memo._lookup catches the same); anything else
     * (KeyboardInterrupt, SystemExit) goes on up. */
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(setup_doc, "setup(code_prefix, classify, tuple_texts, encode, any_autocast, autocast_region, tensor, parameter, aten)\n--\n\n"
"Hand over the tables and helpers the key is made with (pyprof.nvtx.memo does, once); `aten`:\n"
"pyprof.nvtx._aten's capsule, or None for torch's getters.");

static PyObject *hot_setup(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, 9, "setup") < 0)
        return NULL;
    if (!PyDict_Check(a[0]) || !PyDict_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot.setup: code_prefix and tuple_texts must be dicts");
        return NULL;
    }
    PyObject **slots[] = {&code_prefix, &classify, &tuple_texts, &encode, &any_autocast, &autocast_region,
                          &tensor_type, &parameter_type};
    const pyprof_aten_api *api = NULL;
    if (a[8] != Py_None) {
        api = PyCapsule_GetPointer(a[8], PYPROF_ATEN_CAPSULE);
        if (api == NULL)
            return NULL;
        /* An _aten left from an older build (its rebuild failed: it is optional) must not be read
         * past the end of its struct. */
        if (api->abi != PYPROF_ATEN_ABI || api->size != sizeof(pyprof_aten_api)) {
            PyErr_Format(PyExc_ImportError, "pyprof._hot.setup: pyprof.nvtx._aten has interface %d (%zu bytes), "
                         "not %d (%zu bytes): an older build", api->abi, api->size, PYPROF_ATEN_ABI, sizeof(pyprof_aten_api));
            return NULL;
        }
    }
    for (int i = 0; i < 8; i++) {
        Py_INCREF(a[i]);
        Py_XSETREF(*slots[i], a[i]);
    }
    Py_INCREF(a[8]);
    Py_XSETREF(aten_capsule, a[8]);
    aten = api;
    /* Classified by the classify() handed over before. */
    for (int i = 0; i < SEEN_SLOTS; i++)
        Py_CLEAR(seen_code[i]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"key", (PyCFunction)(void (*)(void))hot_key, METH_FASTCALL, key_doc},
    {"lookup", (PyCFunction)(void (*)(void))hot_lookup, METH_FASTCALL, lookup_doc},
    {"setup", (PyCFunction)(void (*)(void))hot_setup, METH_FASTCALL, setup_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyprof.nvtx._hot",
    "The marker cache's hit path in C (pyprof.nvtx.memo falls back to Python without it).", -1, methods,
};

PyMODINIT_FUNC PyInit__hot(void)
{
    s_shape = PyUnicode_InternFromString("shape");
    s_stride = PyUnicode_InternFromString("stride");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_hex = PyUnicode_InternFromString("hex");
    s_empty = PyUnicode_InternFromString("");
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    if (!s_shape || !s_stride || !s_dtype || !s_hex || !s_empty || !zero || !one)
        return NULL;
    getframe = PySys_GetObject("_getframe");  /* borrowed */
    if (getframe == NULL) {  /* ImportError: pyprof.nvtx.memo then uses the Python path */
        PyErr_SetString(PyExc_ImportError, "pyprof._hot: sys._getframe is missing");
        return NULL;
    }
    Py_INCREF(getframe);
    none_part = PyTuple_Pack(2, (PyObject *)Py_TYPE(Py_None), Py_None);
    true_part = PyTuple_Pack(2, (PyObject *)&PyBool_Type, Py_True);
    false_part = PyTuple_Pack(2, (PyObject *)&PyBool_Type, Py_False);
    if (!none_part || !true_part || !false_part)
        return NULL;
    return PyModule_Create(&module);
}
