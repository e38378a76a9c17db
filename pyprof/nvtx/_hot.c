/* The marker cache's hit path in C: pyprof.nvtx.memo.lookup without the interpreter.
 *
 * A wrapped call in steady state needs only the key of its call (call site, module, autocast
 * dtype, a description per argument) and one dict look-up; written in Python that is most of the
 * cost pyprof adds to a call (the key's bytecode, a frame object per frame walked). The key made
 * here is bytes, equal for two calls only where their marker texts are equal (tests check that it
 * tells apart the same calls as memo.key over a table of calls); on a miss it goes back to the
 * wrapper, and memo.marker stores the text under it. An Exception in making the key is cleared and
 * reported as no key, as memo._lookup does: the Python path then encodes the call alone and raises
 * or recovers as it always did; KeyboardInterrupt and SystemExit go on up.
 *
 * setup() hands over memo's tables and helpers once; nothing here imports torch: a tensor's part
 * of the key is read through torch's Python getters.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

static PyObject *code_prefix;     /* site.code_prefix: id(code) -> (code, site prefix or "") */
static PyObject *classify;        /* site.classify(code) -> that entry, stored */
static PyObject *tuple_texts;     /* marker.tuple_texts: id(tuple) -> (tuple, text) */
static PyObject *encode;          /* marker.encode(value) -> JSON text */
static PyObject *any_autocast;    /* () -> bool, False outside every autocast region */
static PyObject *autocast_region; /* () -> ',"autocast":"<dtype>"' or "" */
static PyObject *tensor_type, *parameter_type, *dtype_type;
static PyObject *s_shape, *s_stride, *s_dtype, *s_requires_grad, *one;
static PyObject *getframe;         /* sys._getframe */
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

/* The key is bytes: a tag per part, fixed-size numbers, texts with their length first, so that no
 * two different sequences of parts write the same bytes. One object per call instead of a tuple
 * per tensor and an int per size, hashed once over a flat buffer. */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char stack[512];
} keybuf;

static int kb_put(keybuf *b, const void *src, Py_ssize_t len)
{
    if (b->n + len > b->cap) {
        Py_ssize_t cap = 2 * (b->n + len);
        char *p = PyMem_Malloc(cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(p, b->p, b->n);
        if (b->p != b->stack)
            PyMem_Free(b->p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, len);
    b->n += len;
    return 0;
}

static int kb_tag(keybuf *b, char tag)
{
    return kb_put(b, &tag, 1);
}

static int kb_int(keybuf *b, long long v)
{
    return kb_put(b, &v, sizeof v);
}

/* tag, length, UTF-8 of str s; -1 with an error set for anything else */
static int kb_text(keybuf *b, char tag, PyObject *s)
{
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot: a key text is not a str");
        return -1;
    }
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(s, &len);
    if (u == NULL || kb_tag(b, tag) < 0 || kb_int(b, len) < 0)
        return -1;
    return kb_put(b, u, len);
}

/* A tuple or list of Python ints (torch.Size, stride(), a tuple or list argument), its length
 * first; 0 when an item is not an exact int that fits in 64 bits (nothing written then, no error
 * set), -1 on error. Nothing here runs Python code: a list cannot change under the walk. */
static int kb_ints(keybuf *b, PyObject *seq)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), start = b->n;
    if (kb_int(b, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        int overflow = 0;
        long long x = PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
        if (!PyLong_CheckExact(v) || overflow) {
            b->n = start;
            return 0;
        }
        if (kb_int(b, x) < 0)
            return -1;
    }
    return 1;
}

/* A tensor's shape, strides, dtype and requires_grad through torch's getters. */
static int kb_tensor(keybuf *b, PyObject *a)
{
    PyObject *shape = PyObject_GetAttr(a, s_shape);
    PyObject *stride = shape ? PyObject_CallMethodNoArgs(a, s_stride) : NULL;
    PyObject *dtype = stride ? PyObject_GetAttr(a, s_dtype) : NULL;
    PyObject *grad = dtype ? PyObject_GetAttr(a, s_requires_grad) : NULL;
    int r = -1, ints;
    if (grad == NULL)
        goto done;
    if (!PyTuple_Check(shape) || !PyTuple_Check(stride) || Py_TYPE(dtype) != (PyTypeObject *)dtype_type) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot: a tensor's shape, stride() or dtype is not torch's");
        goto done;
    }
    /* dtypes are torch's own objects, alive as long as torch: one is its address; a tensor that
       requires grad is tagged apart (its text says so) */
    if (kb_tag(b, grad == Py_True ? 'R' : 'G') < 0 || kb_int(b, (long long)(size_t)dtype) < 0)
        goto done;
    ints = kb_ints(b, shape);
    if (ints == 1)
        ints = kb_ints(b, stride);
    if (ints == 0)  /* a SymInt or a tensor among the sizes (torch.jit.trace) */
        PyErr_SetString(PyExc_TypeError, "pyprof._hot: a tensor's size or stride is not an int");
    r = ints == 1 ? 0 : -1;
done:
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(dtype);
    Py_XDECREF(grad);
    return r;
}

/* The longest tuple keyed by its ints: marker.MAX_LIST, the items a tuple's text writes. */
#define KEY_TUPLE_INTS 16

/* One argument's part of the key (what memo._key's part tells apart, by other means). */
static int kb_part(keybuf *b, PyObject *a)
{
    PyObject *t = (PyObject *)Py_TYPE(a);
    if (t == tensor_type || t == parameter_type)
        return kb_tensor(b, a);
    if (a == Py_None)
        return kb_tag(b, 'N');
    if (a == Py_True || a == Py_False)
        return kb_tag(b, a == Py_True ? 't' : 'f');
    if (t == (PyObject *)&PyLong_Type) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (!overflow)
            return x == -1 && PyErr_Occurred() ? -1 : kb_tag(b, 'i') < 0 ? -1 : kb_int(b, x);
    } else if (t == (PyObject *)&PyUnicode_Type) {
        return kb_text(b, 's', a);
    } else if (t == (PyObject *)&PyFloat_Type) {
        /* bits: 0.0 and -0.0 apart, as their texts are; every nan one, as its text is */
        double d = PyFloat_AS_DOUBLE(a);
        if (d != d)
            d = Py_NAN;
        return kb_tag(b, 'd') < 0 ? -1 : kb_put(b, &d, sizeof d);
    } else if (t == (PyObject *)&PyTuple_Type || t == (PyObject *)&PyList_Type) {
        /* A short tuple or list of ints by its values, as the text is the same for both; any
         * other by its text, which a long one's is from its first KEY_TUPLE_INTS items (keying
         * all of a fresh 100,000-int tuple made each cached key 800 KB) */
        if (PySequence_Fast_GET_SIZE(a) <= KEY_TUPLE_INTS) {
            Py_ssize_t start = b->n;
            int r = kb_tag(b, '(') < 0 ? -1 : kb_ints(b, a);
            if (r != 0)
                return r < 0 ? -1 : 0;
            b->n = start;
        }
        if (t == (PyObject *)&PyList_Type)
            goto encoded;
        PyObject *id = PyLong_FromVoidPtr(a);
        if (id == NULL)
            return -1;
        PyObject *hit = PyDict_GetItemWithError(tuple_texts, id);
        Py_DECREF(id);
        if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2 && PyTuple_GET_ITEM(hit, 0) == a) {
            PyObject *text = PyTuple_GET_ITEM(hit, 1);
            Py_INCREF(text);
            int r2 = kb_text(b, 'e', text);
            Py_DECREF(text);
            return r2;
        }
        if (PyErr_Occurred())
            return -1;
    }
    /* anything else by its encoding, as marker.build writes it */
encoded:;
    PyObject *text = PyObject_CallOneArg(encode, a);
    if (text == NULL)
        return -1;
    int r = kb_text(b, 'e', text);
    Py_DECREF(text);
    return r;
}

static int kb_autocast(keybuf *b)
{
    PyObject *on = PyObject_CallNoArgs(any_autocast);
    if (on == NULL)
        return -1;
    int truth = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (truth < 0)
        return -1;
    if (!truth)
        return kb_tag(b, '-');
    PyObject *region = PyObject_CallNoArgs(autocast_region);
    if (region == NULL)
        return -1;
    int r = kb_text(b, 'a', region);
    Py_DECREF(region);
    return r;
}

/* The key of a call made by the caller's caller: call site (code object by address, held by the
 * cache entry, and instruction offset), module fragment, autocast dtype, then a part per argument
 * and per keyword argument. New bytes, or NULL with an error set. */
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
    keybuf b;
    b.p = b.stack;
    b.n = 0;
    b.cap = sizeof b.stack;
    long long site[2] = {(long long)(size_t)code, lasti};
    Py_XDECREF(code);
    PyObject *key = NULL;
    if (kb_put(&b, site, sizeof site) < 0 || kb_text(&b, 'm', mod) < 0 || kb_autocast(&b) < 0)
        goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t j = 0; j < n; j++)
        if (kb_part(&b, PyTuple_GET_ITEM(args, j)) < 0)
            goto done;
    Py_ssize_t nk = kwargs != Py_None ? PyDict_GET_SIZE(kwargs) : 0;
    if (nk) {
        if (kb_tag(&b, 'K') < 0)
            goto done;
        Py_ssize_t pos = 0, seen = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            /* kb_part may run Python code (a getter, encode()) that changes the dict: hold k and
             * v while it runs, and check the size once the walk is done. */
            Py_INCREF(k);
            Py_INCREF(v);
            int r = kb_text(&b, 'k', k) < 0 ? -1 : kb_part(&b, v);
            Py_DECREF(k);
            Py_DECREF(v);
            if (r < 0)
                goto done;
            seen++;
        }
        if (seen != nk || PyDict_GET_SIZE(kwargs) != nk) {
            PyErr_SetString(PyExc_RuntimeError, "pyprof._hot: kwargs changed size");
            goto done;
        }
    }
    key = PyBytes_FromStringAndSize(b.p, b.n);
done:
    if (b.p != b.stack)
        PyMem_Free(b.p);
    return key;
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
"The marker-cache key (bytes) of a call made by the caller's caller: equal for two calls only\n"
"where their marker texts are equal.");

static PyObject *hot_key(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, 3, "key") < 0)
        return NULL;
    return call_key(a[0], a[1], a[2]);
}

PyDoc_STRVAR(lookup_doc, "lookup(cache, args, kwargs, mod)\n--\n\n"
"For this call of the caller's caller: the marker text cached in `cache` (a str); on a miss the\n"
"call's key, for memo.marker to store the text under; None where no key could be made (memo.marker\n"
"then encodes the call alone).");

static PyObject *hot_lookup(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, 4, "lookup") < 0)
        return NULL;
    if (!PyDict_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot.lookup: cache must be a dict");
        return NULL;
    }
    PyObject *key = call_key(a[1], a[2], a[3]);
    if (key == NULL) {
        /* An Exception in making the key (memo._lookup catches the same); anything else
         * (KeyboardInterrupt, SystemExit) goes on up. */
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *hit = PyDict_GetItemWithError(a[0], key);
    if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(hit, 0))) {
        PyObject *text = PyTuple_GET_ITEM(hit, 0);
        Py_INCREF(text);
        Py_DECREF(key);
        return text;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    return key;
}

PyDoc_STRVAR(setup_doc, "setup(code_prefix, classify, tuple_texts, encode, any_autocast, autocast_region, tensor, parameter, dtype)\n--\n\n"
"Hand over the tables and helpers the key is made with (pyprof.nvtx.memo does, once).");

#define SETUP_OBJECTS 9

static PyObject *hot_setup(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (arity(a, n, SETUP_OBJECTS, "setup") < 0)
        return NULL;
    if (!PyDict_Check(a[0]) || !PyDict_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "pyprof._hot.setup: code_prefix and tuple_texts must be dicts");
        return NULL;
    }
    PyObject **slots[SETUP_OBJECTS] = {&code_prefix, &classify, &tuple_texts, &encode, &any_autocast,
                                       &autocast_region, &tensor_type, &parameter_type, &dtype_type};
    for (int i = 0; i < SETUP_OBJECTS; i++) {
        Py_INCREF(a[i]);
        Py_XSETREF(*slots[i], a[i]);
    }
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
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    one = PyLong_FromLong(1);
    if (!s_shape || !s_stride || !s_dtype || !s_requires_grad || !one)
        return NULL;
    getframe = PySys_GetObject("_getframe");  /* borrowed */
    if (getframe == NULL) {  /* ImportError: pyprof.nvtx.memo then uses the Python path */
        PyErr_SetString(PyExc_ImportError, "pyprof._hot: sys._getframe is missing");
        return NULL;
    }
    Py_INCREF(getframe);
    return PyModule_Create(&module);
}
