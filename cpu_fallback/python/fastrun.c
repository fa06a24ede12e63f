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
 * Raises ValueError for a buffer of the wrong size or layout; returns the vki_status (0: ok) otherwise. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))fast_run, METH_FASTCALL, "run(fn, graph, buffers, sizes, threads) -> status"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrun", "One native graph run without ctypes.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastrun(void) { return PyModule_Create(&module); }
