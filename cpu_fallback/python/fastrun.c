/* vkinfer._fastrun: one native graph run from Python without ctypes marshalling.
 *
 * ctypes costs about 1.3 us per graph run in argument handling alone (a pointer array built per call, the
 * data address of every array through c_char.from_buffer, then the foreign call): on a tiny model that
 * is more than the model's own compute (0.66 us for an 8x8x8 3x3 convolution). This module takes the
 * arrays through the buffer protocol and calls vki_graph_run through the function pointer ctypes resolved,
 * so it links to no library: whichever libvkinfer_cpu the package loaded (the ASan build in the tests, a
 * worktree's in `vkinfer bench ab`) is the one called.
 *
 *   run(fn, graph, buffers, sizes, threads) -> status
 *     fn       int: the address of vki_graph_run
 *     graph    int: the vki_graph* handle
 *     buffers  tuple of C-contiguous buffer objects (numpy arrays), one per external buffer (inputs may be
 *              read-only: the graph never writes them)
 *     sizes    tuple of int: the byte size the graph expects of each
 *     threads  int
 * Raises ValueError for a buffer of the wrong size or layout; returns the vki_status (0: ok) otherwise.
 *
 *   Runner(fn, graph, owner, names, formats, shapes, out_shapes, out_dtypes, threads, ndarray, empty)
 *     A whole session's `run` for the common call, in C: a CPU plan that is one native graph and a feed of
 *     exactly the model's inputs as C-contiguous numpy arrays of their declared dtype and shape. Calling it
 *     with the feed dict returns the list of fresh output arrays, or None when the feed is anything else (the
 *     Python path then runs it, or raises the error that names the culprit). Measured on an 8x8x8 3x3
 *     convolution (1 thread, Zen 5): the Python fast path above it took 2.9 us per run, of which reading
 *     $VKINFER_CPU_THREADS was 1.3 us and the checks and output allocation 0.8 us; the graph itself 0.66 us.
 *     owner     the Python object that frees the graph (kept alive while the runner is)
 *     names     tuple of str: input names, in the graph's external-buffer order
 *     formats   tuple of str: each input's buffer-protocol format as numpy exports it ("b", "B", "f", ...)
 *     shapes    tuple of tuple of int
 *     NaN inputs are refused by the graph's quantize operators as they read them (status VKI_ENAN).
 *     out_*     the outputs' shapes (tuples) and numpy dtypes, allocated with `empty` (numpy.empty)
 *     ndarray   numpy.ndarray: only exact ndarrays take this path */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int (*graph_run_fn)(void* g, void* const* ext, uint32_t threads);

#define MAX_EXT 64 /* larger graphs take the ctypes path */

static PyObject* fast_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "run(fn, graph, buffers, sizes, threads)");
        return NULL;
    }
    void* fn = PyLong_AsVoidPtr(args[0]);
    void* g = PyLong_AsVoidPtr(args[1]);
    unsigned long threads = PyLong_AsUnsignedLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (!fn || !g) {
        PyErr_SetString(PyExc_ValueError, "internal: NULL graph or function");
        return NULL;
    }
    if (!PyTuple_Check(args[2]) || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "internal: buffers and sizes must be tuples");
        return NULL;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(args[2]);
    if (n != PyTuple_GET_SIZE(args[3]) || n > MAX_EXT) {
        PyErr_Format(PyExc_ValueError, "internal: %zd buffers for %zd sizes (at most %d)", n,
                     PyTuple_GET_SIZE(args[3]), MAX_EXT);
        return NULL;
    }
    Py_buffer views[MAX_EXT];
    void* ptrs[MAX_EXT];
    Py_ssize_t got = 0;
    PyObject* result = NULL;
    for (; got < n; got++) {
        /* PyBUF_WRITABLE is not asked: inputs may be read-only arrays; the graph never writes them. */
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[2], got), &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        const Py_ssize_t want = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[3], got));
        if (want < 0 && PyErr_Occurred()) {
            got++;
            goto done;
        }
        if (views[got].len != want) {
            PyErr_Format(PyExc_ValueError, "internal: external buffer %zd is %zd bytes, the graph needs %zd", got,
                         views[got].len, want);
            got++;
            goto done;
        }
        ptrs[got] = views[got].buf;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS  /* concurrent runs of other sessions, and Python threads, go on meanwhile */
    status = ((graph_run_fn)fn)(g, ptrs, (uint32_t)threads);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(status);
done:
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* --- Runner ---------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    graph_run_fn fn;
    void* graph;
    uint32_t threads;
    Py_ssize_t n_in, n_out;
    PyObject* owner;
    PyObject* names;   /* tuple of str */
    PyObject* formats; /* tuple of bytes (format strings) */
    PyObject* out_args; /* tuple of (shape, dtype) tuples */
    PyObject* ndarray;
    PyObject* empty;
    Py_ssize_t ndim[MAX_EXT];
    Py_ssize_t shape[MAX_EXT][8];
    Py_ssize_t bytes[MAX_EXT];
} Runner;

static PyObject* runner_call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames)
{
    Runner* self = (Runner*)self_;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "Runner(feed)");
        return NULL;
    }
    PyObject* feed = args[0];
    if (!PyDict_CheckExact(feed) || PyDict_GET_SIZE(feed) != self->n_in) Py_RETURN_NONE;
    Py_buffer views[MAX_EXT];
    void* ptrs[MAX_EXT];
    Py_ssize_t got = 0;
    PyObject* outs = NULL;
    PyObject* result = NULL;
    for (; got < self->n_in; got++) {
        PyObject* v = PyDict_GetItemWithError(feed, PyTuple_GET_ITEM(self->names, got));
        if (!v) {
            if (PyErr_Occurred()) goto done;
            goto other; /* a missing input: the general path names it */
        }
        if ((PyObject*)Py_TYPE(v) != self->ndarray) goto other;
        if (PyObject_GetBuffer(v, &views[got], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear(); /* strided: the general path copies it */
            goto other;
        }
        Py_buffer* b = &views[got];
        int ok = b->ndim == self->ndim[got] && b->len == self->bytes[got] && b->format &&
                 strcmp(b->format, PyBytes_AS_STRING(PyTuple_GET_ITEM(self->formats, got))) == 0;
        for (int d = 0; ok && d < b->ndim; d++) ok = b->shape[d] == self->shape[got][d];
        if (!ok) {
            got++;
            goto other;
        }
        ptrs[got] = b->buf;
    }
    outs = PyList_New(self->n_out);
    if (!outs) goto done;
    for (Py_ssize_t k = 0; k < self->n_out; k++) {
        PyObject* a = PyObject_Call(self->empty, PyTuple_GET_ITEM(self->out_args, k), NULL);
        if (!a) goto done;
        PyList_SET_ITEM(outs, k, a);
        Py_buffer* b = &views[got];
        if (PyObject_GetBuffer(a, b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
        got++;
        if (b->len != self->bytes[self->n_in + k]) {
            PyErr_SetString(PyExc_RuntimeError, "internal: output array size differs from the graph's");
            goto done;
        }
        ptrs[self->n_in + k] = b->buf;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = self->fn(self->graph, ptrs, self->threads);
    Py_END_ALLOW_THREADS
    if (status) {
        /* the Python path turns the status into the library's error (vki_last_error) */
        result = PyLong_FromLong(status);
        goto done;
    }
    result = outs;
    outs = NULL;
    goto done;
other:
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    Py_XDECREF(outs);
    return result;
}

static void runner_dealloc(PyObject* self_)
{
    Runner* self = (Runner*)self_;
    Py_XDECREF(self->owner);
    Py_XDECREF(self->names);
    Py_XDECREF(self->formats);
    Py_XDECREF(self->out_args);
    Py_XDECREF(self->ndarray);
    Py_XDECREF(self->empty);
    Py_TYPE(self)->tp_free(self_);
}

static Py_ssize_t shape_of(PyObject* t, Py_ssize_t* dims, Py_ssize_t* count)
{
    /* the tuple's dimensions into dims (at most 8); returns the element count, -1 on error */
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > 8) {
        PyErr_SetString(PyExc_ValueError, "internal: a shape must be a tuple of at most 8 ints");
        return -1;
    }
    Py_ssize_t n = 1;
    *count = PyTuple_GET_SIZE(t);
    for (Py_ssize_t d = 0; d < *count; d++) {
        dims[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, d));
        if (dims[d] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "internal: negative dimension");
            return -1;
        }
        n *= dims[d];
    }
    return n;
}

static PyObject* runner_new(PyTypeObject* type, PyObject* args, PyObject* kw)
{
    PyObject *fn, *graph, *owner, *names, *formats, *shapes, *oshapes, *odtypes, *ndarray, *empty;
    unsigned long threads;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Runner takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!O!kOO", &fn, &graph, &owner, &PyTuple_Type, &names, &PyTuple_Type,
                          &formats, &PyTuple_Type, &shapes, &PyTuple_Type, &oshapes, &PyTuple_Type, &odtypes,
                          &threads, &ndarray, &empty))
        return NULL;
    const Py_ssize_t n_in = PyTuple_GET_SIZE(names), n_out = PyTuple_GET_SIZE(oshapes);
    if (PyTuple_GET_SIZE(formats) != n_in || PyTuple_GET_SIZE(shapes) != n_in ||
        PyTuple_GET_SIZE(odtypes) != n_out || n_in + n_out > MAX_EXT) {
        PyErr_SetString(PyExc_ValueError, "internal: Runner's tuples differ in length or exceed 64 buffers");
        return NULL;
    }
    Runner* self = (Runner*)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = runner_call;
    self->fn = (graph_run_fn)PyLong_AsVoidPtr(fn);
    self->graph = PyLong_AsVoidPtr(graph);
    self->threads = (uint32_t)threads;
    self->n_in = n_in;
    self->n_out = n_out;
    Py_INCREF(owner); self->owner = owner;
    Py_INCREF(names); self->names = names;
    Py_INCREF(ndarray); self->ndarray = ndarray;
    Py_INCREF(empty); self->empty = empty;
    if (PyErr_Occurred()) goto fail;
    if (!self->fn || !self->graph) {
        PyErr_SetString(PyExc_ValueError, "internal: NULL graph or function");
        goto fail;
    }
    self->formats = PyTuple_New(n_in);
    self->out_args = PyTuple_New(n_out);
    if (!self->formats || !self->out_args) goto fail;
    for (Py_ssize_t k = 0; k < n_in; k++) {
        PyObject* f = PyUnicode_AsASCIIString(PyTuple_GET_ITEM(formats, k));
        if (!f) goto fail;
        PyTuple_SET_ITEM(self->formats, k, f);
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "internal: input names must be str");
            goto fail;
        }
        const Py_ssize_t n = shape_of(PyTuple_GET_ITEM(shapes, k), self->shape[k], &self->ndim[k]);
        if (n < 0) goto fail;
        const char* fs = PyBytes_AS_STRING(f);
        const Py_ssize_t item = (fs[0] == 'f' || fs[0] == 'i' || fs[0] == 'I') && !fs[1] ? 4
                                : (fs[0] == 'b' || fs[0] == 'B' || fs[0] == '?') && !fs[1] ? 1 : -1;
        if (item < 0) {
            PyErr_Format(PyExc_ValueError, "internal: unsupported input format %s", fs);
            goto fail;
        }
        self->bytes[k] = n * item;
    }
    for (Py_ssize_t k = 0; k < n_out; k++) {
        Py_ssize_t dims[8], nd;
        const Py_ssize_t n = shape_of(PyTuple_GET_ITEM(oshapes, k), dims, &nd);
        if (n < 0) goto fail;
        PyObject* dt = PyTuple_GET_ITEM(odtypes, k);
        PyObject* isz = PyObject_GetAttrString(dt, "itemsize");
        if (!isz) goto fail;
        self->bytes[n_in + k] = n * PyLong_AsSsize_t(isz);
        Py_DECREF(isz);
        PyObject* a = PyTuple_Pack(2, PyTuple_GET_ITEM(oshapes, k), dt);
        if (!a) goto fail;
        PyTuple_SET_ITEM(self->out_args, k, a);
    }
    return (PyObject*)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vkinfer._fastrun.Runner",
    .tp_basicsize = sizeof(Runner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Runner, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = runner_new,
    .tp_dealloc = runner_dealloc,
    .tp_doc = "Runner(fn, graph, owner, names, formats, shapes, out_shapes, out_dtypes, threads, ndarray, empty)"
              "(feed) -> list of outputs, a vki_status, or None for a feed the Python path must take",
};

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))fast_run, METH_FASTCALL, "run(fn, graph, buffers, sizes, threads) -> status"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrun", "One native graph run without ctypes.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastrun(void)
{
    if (PyType_Ready(&RunnerType) < 0) return NULL;
    PyObject* m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RunnerType);
    if (PyModule_AddObject(m, "Runner", (PyObject*)&RunnerType) < 0) {
        Py_DECREF(&RunnerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
