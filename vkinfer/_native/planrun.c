/* vkinfer._planrun: a whole compiled plan in one native call, with no Vulkan dependency.
 *
 * Why one file of about 900 lines: it is one CPython type (and the plain graph run it grew from) whose parsing,
 * runs and feed call share the Runner struct and its static helpers; the per-call path (run_feed -> execute) stays
 * in one translation unit, where the compiler inlines it, and a split would need a private header of the struct.
 *
 * vkinfer's plan (vkinfer/compiler/plan.py) is a list of segments; where none runs on the host, a Runner runs them
 * all without returning to Python (vkinfer/compiler/native.py builds it): each CPU segment's native graph through
 * vki_graph_run's address (resolved by ctypes from whichever libvkinfer_cpu the package loaded: the ASan build in
 * the tests, a worktree's in `vkinfer bench ab`; this module links no library), each Vulkan segment as pack,
 * submit, wait, unpack through the C table vkinfer._vkcore exports (vk_api.h), imported only when a plan has a
 * Vulkan step: a CPU-only install, and every CPU-only plan, runs in one call without _vkcore or libvulkan.
 * Tensors between segments live in host arrays ("slots") allocated once with the plan.
 *
 * Why in C, and why one call: ctypes costs about 1.3 us per graph run in argument handling alone, more than a
 * tiny model's own compute (0.66 us for an 8x8x8 3x3 convolution); the Python fast path of a session's run took
 * 2.9 us of which the checks and output allocation were 0.8 us (1 thread, Zen 5). On lavapipe the Python between
 * MobileNetV2's three segments cost 200-260 us per run beside 120 us in the native code (a device that shares the
 * CPU evicts the interpreter: 1000 logits took 67-90 us to unpack right after the wait, 3.8 us warm), and the
 * Python of the session's call itself (feed checks, numpy.empty, the lock) 71 us. The CPython C API rather than
 * pybind11: the common call of a tiny CPU model is a few attribute-free C calls (measured in docs/benchmarks.md).
 *
 *   run(fn, graph, buffers, sizes, threads) -> status
 *     One native graph run (vkinfer.cpu.graph.NativeGraph.run): fn is vki_graph_run's address, graph the
 *     vki_graph*, buffers a tuple of C-contiguous buffer objects of exactly `sizes` bytes (inputs may be
 *     read-only: the graph never writes them). ValueError for a buffer of the wrong size or layout; returns the
 *     vki_status (0: ok) otherwise.
 *
 *   Runner(inputs, outputs, slot_bytes, persistent, steps, locks=(), carries=())
 *     slot_bytes   the byte size of every slot: the plan's inputs, then its outputs, then intermediates
 *     persistent   {slot: array} for every intermediate slot (C-contiguous, writable, kept alive)
 *     steps        ("cpu", fn, graph, owner, [slot of each external buffer], threads) or
 *                  ("vulkan", sequence, packs, unpacks), each move (slot, buffer, shape, nchw, flip) as
 *                  _vkcore.Buffer.write_nchw/write_rows (packs) and read_nchw/read_rows (unpacks) take them
 *     locks        objects with acquire()/release() (the Vulkan devices' locks), taken in order around a run
 *     carries      (source slot, persistent slot) pairs copied after each successful run: a streaming model's
 *                  state, its next run's input (runs of such a runner hold its mutex)
 *   .run(inputs, outputs, timed) -> (status of the first failing CPU graph or 0, [device ns or None per Vulkan
 *     step]): inputs and outputs C-contiguous arrays of exactly their slots' sizes (outputs writable).
 *   .set_feed(names, formats, shapes, outs, ndarray, empty, segments), then
 *   .run_feed(feed) -> the session's common call: for a dict of exactly the inputs as C-contiguous ndarrays of
 *     their buffer format and shape, the list of new output arrays (numpy.empty(shape, dtype) per outs entry);
 *     a CPU graph's nonzero status (the caller raises its error: a refused NaN names the input); None for any
 *     other feed (the caller's checked path takes it, and names what is wrong). `segments` have `timed` (read
 *     per run) and `last_device_ns` (set after a timed run).
 *   .mapped: intermediate slots a CPU graph writes straight into a Vulkan buffer's memory (no pack step).
 *   Runs hold the locks, then the runner's own mutex (where runs share slots or device buffers), and release the
 *   GIL while the steps run. A failed Vulkan step raises RuntimeError with the driver's message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vk_api.h"

typedef int (*graph_run_fn)(void* g, void* const* ext, uint32_t threads);

/* Arrays of up to this many buffers or slots live on the stack per call; larger plans allocate. */
#define STACK_N 64

static PyObject* s_timed;          /* "timed" */
static PyObject* s_last_device_ns; /* "last_device_ns" */
static const vki_vk_api* g_vk;    /* _vkcore's table, imported with the first Vulkan step */

static const vki_vk_api* vk_api(void)
{
    if (!g_vk) {
        const vki_vk_api* api = (const vki_vk_api*)PyCapsule_Import(VKI_VK_API_CAPSULE, 0);
        if (!api) return NULL;
        if (api->version != VKI_VK_API_VERSION) {
            PyErr_Format(PyExc_ImportError, "vkinfer._vkcore's plan-runner table is version %u, _planrun needs %u "
                         "(rebuild both: make native)", api->version, VKI_VK_API_VERSION);
            return NULL;
        }
        g_vk = api;
    }
    return g_vk;
}

/* Buffers of a call: on the stack up to STACK_N, else on the heap. */
typedef struct {
    Py_buffer stack[STACK_N];
    Py_buffer* v;
    Py_ssize_t got;
} Views;

static int views_init(Views* w, Py_ssize_t n)
{
    w->got = 0;
    w->v = n <= STACK_N ? w->stack : PyMem_Malloc((size_t)n * sizeof(Py_buffer));
    if (!w->v) PyErr_NoMemory();
    return w->v ? 0 : -1;
}

static void views_release(Views* w)
{
    for (Py_ssize_t k = 0; k < w->got; k++) PyBuffer_Release(&w->v[k]);
    if (w->v && w->v != w->stack) PyMem_Free(w->v);
    w->v = NULL;
}

/* --- run(fn, graph, buffers, sizes, threads) ------------------------------------------------------------------ */

static PyObject* plain_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs)
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
    if (n != PyTuple_GET_SIZE(args[3])) {
        PyErr_Format(PyExc_ValueError, "internal: %zd buffers for %zd sizes", n, PyTuple_GET_SIZE(args[3]));
        return NULL;
    }
    Views w;
    void* ptr_stack[STACK_N];
    void** ptrs = n <= STACK_N ? ptr_stack : PyMem_Malloc((size_t)n * sizeof(void*));
    PyObject* result = NULL;
    if (!ptrs) return PyErr_NoMemory();
    if (views_init(&w, n) < 0) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        /* PyBUF_WRITABLE is not asked: inputs may be read-only arrays; the graph never writes them. */
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[2], k), &w.v[k], PyBUF_C_CONTIGUOUS) < 0) goto done;
        w.got++;
        const Py_ssize_t want = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[3], k));
        if (want < 0 && PyErr_Occurred()) goto done;
        if (w.v[k].len != want) {
            PyErr_Format(PyExc_ValueError, "internal: external buffer %zd is %zd bytes, the graph needs %zd", k,
                         w.v[k].len, want);
            goto done;
        }
        ptrs[k] = w.v[k].buf;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS /* concurrent runs of other sessions, and Python threads, go on meanwhile */
    status = ((graph_run_fn)fn)(g, ptrs, (uint32_t)threads);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(status);
done:
    views_release(&w);
    if (ptrs != ptr_stack) PyMem_Free(ptrs);
    return result;
}

/* --- Runner ----------------------------------------------------------------------------------------------- */

typedef struct {
    size_t slot;
    vki_vk_move* mv;
} Move;

typedef struct {
    int vulkan;
    graph_run_fn fn; /* cpu */
    void* graph;
    uint32_t threads;
    Py_ssize_t n_ext;
    size_t* ext;  /* the slot of each external buffer */
    int identity; /* ext[j] == j: the slots' addresses are the graph's external buffers as they are */
    vki_vk_seq* seq; /* vulkan */
    Py_ssize_t n_packs, n_unpacks;
    Move* packs;
    Move* unpacks;
} Step;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n_in, n_out, n_slots, n_steps, n_vk, max_ext;
    size_t* slot_bytes;
    void** slot_ptr; /* intermediate slots' memory; inputs and outputs are the call's */
    Step* steps;
    const vki_vk_api* vk; /* NULL without Vulkan steps */
    PyObject* keep;       /* list: graphs' owners, sequences, buffers, slot arrays, locks */
    Py_buffer* views;     /* the persistent arrays', held while the runner lives */
    Py_ssize_t n_views;
    PyThread_type_lock mutex; /* NULL where runs share nothing (one CPU graph, which locks itself) */
    int single; /* one CPU graph over the call's inputs and outputs, no locks: run_feed calls it directly */
    PyObject** acquire;       /* the locks' bound acquire and release methods */
    PyObject** release;
    Py_ssize_t n_locks;
    size_t* carry; /* (source slot, persistent slot) pairs copied after every successful run */
    Py_ssize_t n_carry;
    PyObject* mapped; /* list of int */
    /* run_feed */
    int feed_ready;
    PyObject* names;   /* tuple of str */
    char** formats;    /* each input's buffer format */
    Py_ssize_t* ndim;  /* each input's rank, and its dimensions from dims[dim_at[k]] */
    Py_ssize_t* dim_at;
    Py_ssize_t* dims;
    PyObject* out_shape; /* tuples: each output's shape and dtype, for empty(shape, dtype) */
    PyObject* out_dtype;
    PyObject* ndarray;
    PyObject* empty;
    PyObject* segs; /* tuple */
} Runner;

static void free_feed(Runner* self)
{
    if (self->formats)
        for (Py_ssize_t k = 0; k < self->n_in; k++) PyMem_Free(self->formats[k]);
    PyMem_Free(self->formats);
    PyMem_Free(self->ndim);
    PyMem_Free(self->dim_at);
    PyMem_Free(self->dims);
    self->formats = NULL;
    self->ndim = self->dim_at = self->dims = NULL;
    Py_CLEAR(self->names);
    Py_CLEAR(self->out_shape);
    Py_CLEAR(self->out_dtype);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->segs);
    self->feed_ready = 0;
}

static void runner_dealloc(PyObject* self_)
{
    Runner* self = (Runner*)self_;
    free_feed(self);
    if (self->steps)
        for (Py_ssize_t i = 0; i < self->n_steps; i++) {
            Step* st = &self->steps[i];
            PyMem_Free(st->ext);
            for (Py_ssize_t j = 0; j < st->n_packs; j++) self->vk->move_free(st->packs[j].mv);
            for (Py_ssize_t j = 0; j < st->n_unpacks; j++) self->vk->move_free(st->unpacks[j].mv);
            PyMem_Free(st->packs);
            PyMem_Free(st->unpacks);
        }
    PyMem_Free(self->steps);
    for (Py_ssize_t k = 0; k < self->n_views; k++) PyBuffer_Release(&self->views[k]);
    PyMem_Free(self->views);
    for (Py_ssize_t k = 0; k < self->n_locks; k++) {
        Py_XDECREF(self->acquire[k]);
        Py_XDECREF(self->release[k]);
    }
    PyMem_Free(self->acquire);
    PyMem_Free(self->release);
    if (self->mutex) PyThread_free_lock(self->mutex);
    PyMem_Free(self->slot_bytes);
    PyMem_Free(self->carry);
    PyMem_Free(self->slot_ptr);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->mapped);
    Py_TYPE(self)->tp_free(self_);
}

static int fail(PyObject* type, const char* msg)
{
    PyErr_SetString(type, msg);
    return -1;
}

static int slot_index(Runner* self, PyObject* o, size_t* out)
{
    const Py_ssize_t k = PyLong_AsSsize_t(o);
    if (k < 0 && PyErr_Occurred()) return -1;
    if (k < 0 || k >= self->n_slots) return fail(PyExc_ValueError, "Runner: slot out of range");
    *out = (size_t)k;
    return 0;
}

static int keep(Runner* self, PyObject* o) { return PyList_Append(self->keep, o); }

static int parse_cpu_step(Runner* self, Step* st, PyObject* t)
{
    if (PySequence_Fast_GET_SIZE(t) != 6)
        return fail(PyExc_ValueError, "Runner: cpu steps are (\"cpu\", fn, graph, owner, ext, threads)");
    PyObject** it = PySequence_Fast_ITEMS(t);
    st->fn = (graph_run_fn)PyLong_AsVoidPtr(it[1]);
    st->graph = PyLong_AsVoidPtr(it[2]);
    unsigned long threads = PyLong_AsUnsignedLong(it[5]);
    if (PyErr_Occurred()) return -1;
    if (!st->fn || !st->graph) return fail(PyExc_ValueError, "Runner: NULL graph or function");
    st->threads = (uint32_t)threads;
    if (keep(self, it[3]) < 0) return -1;
    PyObject* ext = PySequence_Fast(it[4], "Runner: a cpu step's ext must be a sequence of slots");
    if (!ext) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(ext);
    st->ext = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    int rc = st->ext ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) rc = slot_index(self, PySequence_Fast_GET_ITEM(ext, i), &st->ext[i]);
    Py_DECREF(ext);
    st->n_ext = n;
    st->identity = 1;
    for (Py_ssize_t i = 0; i < n; i++) st->identity &= st->ext[i] == (size_t)i;
    if (n > self->max_ext) self->max_ext = n;
    return rc;
}

/* packs or unpacks of a vulkan step: [(slot, buffer, shape, nchw, flip)] */
static int parse_moves(Runner* self, PyObject* list, int read, Move** out, Py_ssize_t* count)
{
    PyObject* seq = PySequence_Fast(list, "Runner: a vulkan step's moves must be a sequence");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    *out = PyMem_Calloc((size_t)n + 1, sizeof(Move));
    if (!*out) rc = (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject* m = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "Runner: a move must be a tuple");
        if (!m) {
            rc = -1;
            break;
        }
        PyObject** f = PySequence_Fast_ITEMS(m);
        Move mv = {0, NULL};
        int nchw = 0;
        long flip = 0;
        if (PySequence_Fast_GET_SIZE(m) != 5)
            rc = fail(PyExc_ValueError, "Runner: moves are (slot, buffer, shape, nchw, flip)");
        if (rc == 0) rc = slot_index(self, f[0], &mv.slot);
        if (rc == 0 && (nchw = PyObject_IsTrue(f[3])) < 0) rc = -1;
        if (rc == 0 && (flip = PyLong_AsLong(f[4])) == -1 && PyErr_Occurred()) rc = -1;
        if (rc == 0 && (flip < 0 || flip > 255)) rc = fail(PyExc_ValueError, "Runner: flip must be a byte");
        if (rc == 0 && !(mv.mv = self->vk->move_new(f[1], f[2], nchw, (int)flip, read))) rc = -1;
        if (rc == 0) {
            (*out)[(*count)++] = mv; /* freed with the runner from here */
            if (keep(self, f[1]) < 0) rc = -1;
        }
        if (rc == 0 && self->vk->move_bytes(mv.mv) != self->slot_bytes[mv.slot])
            rc = fail(PyExc_ValueError, "Runner: a packed tensor differs in size from its slot");
        Py_DECREF(m);
    }
    Py_DECREF(seq);
    return rc;
}

static int parse_vulkan_step(Runner* self, Step* st, PyObject* t)
{
    if (PySequence_Fast_GET_SIZE(t) != 4)
        return fail(PyExc_ValueError, "Runner: vulkan steps are (\"vulkan\", sequence, packs, unpacks)");
    if (!self->vk && !(self->vk = vk_api())) return -1;
    PyObject** it = PySequence_Fast_ITEMS(t);
    st->vulkan = 1;
    if (!(st->seq = self->vk->sequence(it[1])) || keep(self, it[1]) < 0) return -1;
    self->n_vk++;
    if (parse_moves(self, it[2], 0, &st->packs, &st->n_packs) < 0) return -1;
    return parse_moves(self, it[3], 1, &st->unpacks, &st->n_unpacks);
}

/* A pack that is a plain copy (rows already padded to whole words, no XOR: a CPU quantize writing the device
 * layout, or uint8 rows of a multiple of 4) of an intermediate slot that one earlier CPU graph writes and nothing
 * else touches: the graph writes straight into the buffer's host-visible memory instead, and the copy goes.
 * MobileNetV2's 224x224x3 input: the 22 us row pack on lavapipe. */
static int map_copies(Runner* self)
{
    int rc = 0;
    Py_ssize_t* uses = PyMem_Calloc((size_t)self->n_slots + 1, sizeof(Py_ssize_t));
    Py_ssize_t* writer = PyMem_Calloc((size_t)self->n_slots + 1, sizeof(Py_ssize_t));
    if (!uses || !writer) {
        PyErr_NoMemory();
        rc = -1;
        goto done;
    }
    for (Py_ssize_t k = 0; k < self->n_slots; k++) writer[k] = -1;
    for (Py_ssize_t i = 0; i < self->n_steps; i++) {
        const Step* st = &self->steps[i];
        for (Py_ssize_t j = 0; j < st->n_ext; j++) { /* only CPU steps list ext slots */
            uses[st->ext[j]]++;
            if (writer[st->ext[j]] < 0) writer[st->ext[j]] = i;
        }
        for (Py_ssize_t j = 0; j < st->n_packs; j++) uses[st->packs[j].slot]++;
        for (Py_ssize_t j = 0; j < st->n_unpacks; j++) uses[st->unpacks[j].slot]++;
    }
    for (Py_ssize_t i = 0; i < self->n_steps && rc == 0; i++) {
        Step* st = &self->steps[i];
        for (Py_ssize_t j = 0; j < st->n_packs;) {
            const size_t k = st->packs[j].slot;
            uint8_t* plain = self->vk->move_plain(st->packs[j].mv);
            if (plain && k >= (size_t)(self->n_in + self->n_out) && uses[k] == 2 && writer[k] >= 0 && writer[k] < i) {
                PyObject* n = PyLong_FromSize_t(k);
                if (!n || PyList_Append(self->mapped, n) < 0) rc = -1;
                Py_XDECREF(n);
                if (rc) break;
                self->slot_ptr[k] = plain;
                self->vk->move_free(st->packs[j].mv);
                memmove(&st->packs[j], &st->packs[j + 1], (size_t)(st->n_packs - j - 1) * sizeof(Move));
                st->n_packs--;
            } else {
                j++;
            }
        }
    }
done:
    PyMem_Free(uses);
    PyMem_Free(writer);
    return rc;
}

static int parse_persistent(Runner* self, PyObject* persistent)
{
    if (!PyDict_Check(persistent)) return fail(PyExc_TypeError, "Runner: persistent must be a dict {slot: array}");
    self->views = PyMem_Calloc((size_t)PyDict_GET_SIZE(persistent) + 1, sizeof(Py_buffer));
    if (!self->views) return (PyErr_NoMemory(), -1);
    PyObject *key, *arr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(persistent, &pos, &key, &arr)) {
        const Py_ssize_t k = PyLong_AsSsize_t(key);
        if (k < 0 && PyErr_Occurred()) return -1;
        if (k < self->n_in + self->n_out || k >= self->n_slots) return fail(PyExc_ValueError, "Runner: bad persistent slot");
        Py_buffer* v = &self->views[self->n_views];
        if (PyObject_GetBuffer(arr, v, PyBUF_WRITABLE | PyBUF_STRIDES) < 0) return -1;
        self->n_views++;
        if (!PyBuffer_IsContiguous(v, 'C') || (size_t)v->len != self->slot_bytes[k])
            return fail(PyExc_ValueError, "Runner: a persistent slot's array has the wrong size or layout");
        self->slot_ptr[k] = v->buf;
        if (keep(self, arr) < 0) return -1;
    }
    for (Py_ssize_t k = self->n_in + self->n_out; k < self->n_slots; k++)
        if (!self->slot_ptr[k]) return fail(PyExc_ValueError, "Runner: an intermediate slot has no array");
    return 0;
}

static int parse_steps(Runner* self, PyObject* steps)
{
    PyObject* seq = PySequence_Fast(steps, "Runner: steps must be a sequence");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    self->steps = PyMem_Calloc((size_t)n + 1, sizeof(Step));
    if (!self->steps) rc = (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject* t = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "Runner: a step must be a tuple");
        if (!t) {
            rc = -1;
            break;
        }
        self->n_steps = i + 1; /* freed with the runner from here */
        Step* st = &self->steps[i];
        PyObject* kind = PySequence_Fast_GET_SIZE(t) ? PySequence_Fast_GET_ITEM(t, 0) : Py_None;
        if (PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "cpu") == 0)
            rc = parse_cpu_step(self, st, t);
        else if (PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "vulkan") == 0)
            rc = parse_vulkan_step(self, st, t);
        else
            rc = (PyErr_Format(PyExc_ValueError, "Runner: unknown step kind %R", kind), -1);
        Py_DECREF(t);
    }
    Py_DECREF(seq);
    return rc;
}

static int parse_locks(Runner* self, PyObject* locks)
{
    PyObject* seq = PySequence_Fast(locks, "Runner: locks must be a sequence");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    self->acquire = PyMem_Calloc((size_t)n + 1, sizeof(PyObject*));
    self->release = PyMem_Calloc((size_t)n + 1, sizeof(PyObject*));
    if (!self->acquire || !self->release) rc = (PyErr_NoMemory(), -1);
    for (Py_ssize_t k = 0; rc == 0 && k < n; k++) {
        PyObject* lk = PySequence_Fast_GET_ITEM(seq, k);
        self->n_locks = k + 1;
        if (!(self->acquire[k] = PyObject_GetAttrString(lk, "acquire")) ||
            !(self->release[k] = PyObject_GetAttrString(lk, "release")))
            rc = -1;
    }
    Py_DECREF(seq);
    return rc;
}

/* carries: (source, destination) slot pairs of equal size, the destination a persistent slot (a streaming model's
 * state: the value a run assigns becomes the next run's input, copied in C after the steps). */
static int parse_carries(Runner* self, PyObject* carries)
{
    PyObject* seq = PySequence_Fast(carries, "Runner: carries must be a sequence of (source, destination) slots");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->carry = PyMem_Calloc(2 * (size_t)n + 1, sizeof(size_t));
    int rc = self->carry ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject* pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            rc = fail(PyExc_ValueError, "Runner: a carry is a (source, destination) tuple of slots");
            break;
        }
        size_t* c = &self->carry[2 * i];
        rc = slot_index(self, PyTuple_GET_ITEM(pair, 0), &c[0]);
        if (rc == 0) rc = slot_index(self, PyTuple_GET_ITEM(pair, 1), &c[1]);
        if (rc == 0 && (c[0] == c[1] || self->slot_bytes[c[0]] != self->slot_bytes[c[1]] ||
                        c[1] < (size_t)(self->n_in + self->n_out) || !self->slot_ptr[c[1]]))
            rc = fail(PyExc_ValueError, "Runner: a carry joins two distinct slots of one size into a persistent one");
    }
    Py_DECREF(seq);
    self->n_carry = rc == 0 ? n : 0;
    return rc;
}

static PyObject* runner_new(PyTypeObject* type, PyObject* args, PyObject* kw)
{
    static char* kwlist[] = {"inputs", "outputs", "slot_bytes", "persistent", "steps", "locks", "carries", NULL};
    Py_ssize_t n_in, n_out;
    PyObject *bytes, *persistent, *steps, *locks = NULL, *carries = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nnOOO|OO:Runner", kwlist, &n_in, &n_out, &bytes, &persistent, &steps,
                                     &locks, &carries))
        return NULL;
    if (n_in < 0 || n_out < 0) {
        PyErr_SetString(PyExc_ValueError, "Runner: negative count of inputs or outputs");
        return NULL;
    }
    Runner* self = (Runner*)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->n_in = n_in;
    self->n_out = n_out;
    self->keep = PyList_New(0);
    self->mapped = PyList_New(0);
    if (!self->keep || !self->mapped) goto fail;
    PyObject* sb = PySequence_Fast(bytes, "Runner: slot_bytes must be a sequence of ints");
    if (!sb) goto fail;
    self->n_slots = PySequence_Fast_GET_SIZE(sb);
    self->slot_bytes = PyMem_Calloc((size_t)self->n_slots + 1, sizeof(size_t));
    self->slot_ptr = PyMem_Calloc((size_t)self->n_slots + 1, sizeof(void*));
    if (!self->slot_bytes || !self->slot_ptr) {
        Py_DECREF(sb);
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < self->n_slots; k++) {
        self->slot_bytes[k] = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(sb, k));
        if (self->slot_bytes[k] == (size_t)-1 && PyErr_Occurred()) {
            Py_DECREF(sb);
            goto fail;
        }
    }
    Py_DECREF(sb);
    if (n_in + n_out > self->n_slots) {
        fail(PyExc_ValueError, "Runner: fewer slots than inputs and outputs");
        goto fail;
    }
    if (parse_persistent(self, persistent) < 0 || parse_steps(self, steps) < 0 ||
        (locks && parse_locks(self, locks) < 0) || (carries && parse_carries(self, carries) < 0))
        goto fail;
    if (self->vk && map_copies(self) < 0) goto fail;
    if (self->n_vk || self->n_steps > 1 || self->n_views) {
        self->mutex = PyThread_allocate_lock();
        if (!self->mutex) {
            PyErr_SetString(PyExc_MemoryError, "Runner: no lock");
            goto fail;
        }
    }
    self->single = self->n_steps == 1 && !self->steps[0].vulkan && self->steps[0].identity && !self->mutex &&
                   !self->n_locks && self->steps[0].n_ext == self->n_slots;
    return (PyObject*)self;
fail:
    Py_DECREF(self);
    return NULL;
}

#if PY_VERSION_HEX >= 0x030C0000
#define SAVE_ERROR(e) PyObject* e = PyErr_GetRaisedException()
#define RESTORE_ERROR(e) PyErr_SetRaisedException(e)
#else
#define SAVE_ERROR(e) PyObject *e##_t, *e##_v, *e##_tb; PyErr_Fetch(&e##_t, &e##_v, &e##_tb)
#define RESTORE_ERROR(e) PyErr_Restore(e##_t, e##_v, e##_tb)
#endif

/* A Vulkan step's failure as Python's error: vk_api.h's run() codes -2 (device lost) and -3 (out of memory) as
 * vkinfer.errors' classes, so that device="auto" can rerun on the CPU; anything else a RuntimeError. */
static void set_vk_error(int code, const char* msg)
{
    const char* name = code == -2 ? "VulkanDeviceLostError" : code == -3 ? "VulkanOutOfMemoryError" : NULL;
    PyObject* cls = NULL;
    if (name) {
        PyObject* mod = PyImport_ImportModule("vkinfer.errors");
        if (mod) {
            cls = PyObject_GetAttrString(mod, name);
            Py_DECREF(mod);
        }
        if (!cls) PyErr_Clear();
    }
    PyErr_SetString(cls ? cls : PyExc_RuntimeError, msg);
    Py_XDECREF(cls);
}

/* The steps over slot addresses `ptr` (every slot's), with the GIL held on entry and exit: the locks, the mutex
 * and the steps without the GIL. Returns the first failing CPU graph's status or 0; -1 with an exception set. */
static int execute(Runner* self, void** ptr, int timed, uint64_t* ns, signed char* has_ns)
{
    void* ext_stack[STACK_N];
    void** ext = self->max_ext <= STACK_N ? ext_stack : PyMem_Malloc((size_t)self->max_ext * sizeof(void*));
    if (!ext) return (PyErr_NoMemory(), -1);
    int status = 0;
    Py_ssize_t held = 0;
    for (; held < self->n_locks; held++) {
        PyObject* r = PyObject_CallNoArgs(self->acquire[held]);
        if (!r) {
            status = -1;
            break;
        }
        Py_DECREF(r);
    }
    if (status == 0) {
        char err[512]; /* not zero-initialized: a 512-byte clear per call */
        err[0] = '\0';
        int failed = 0;
        const vki_vk_api* vk = self->vk;
        Py_BEGIN_ALLOW_THREADS
        if (self->mutex) PyThread_acquire_lock(self->mutex, WAIT_LOCK);
        Py_ssize_t v = 0;
        for (Py_ssize_t i = 0; i < self->n_steps; i++) {
            const Step* st = &self->steps[i];
            if (!st->vulkan) {
                for (Py_ssize_t j = 0; j < st->n_ext && !st->identity; j++) ext[j] = ptr[st->ext[j]];
                status = st->fn(st->graph, st->identity ? ptr : ext, st->threads);
                if (status) break;
                continue;
            }
            for (Py_ssize_t j = 0; j < st->n_packs; j++) vk->pack(st->packs[j].mv, ptr[st->packs[j].slot]);
            const int r = vk->run(st->seq, timed, &ns[v], err, sizeof err);
            if (r < 0) {
                failed = r;
                break;
            }
            has_ns[v++] = (signed char)r;
            for (Py_ssize_t j = 0; j < st->n_unpacks; j++) vk->unpack(st->unpacks[j].mv, ptr[st->unpacks[j].slot]);
        }
        if (status == 0 && !failed)
            for (Py_ssize_t j = 0; j < self->n_carry; j++)
                memcpy(ptr[self->carry[2 * j + 1]], ptr[self->carry[2 * j]], self->slot_bytes[self->carry[2 * j]]);
        if (self->mutex) PyThread_release_lock(self->mutex);
        Py_END_ALLOW_THREADS
        if (failed) {
            set_vk_error(failed, err);
            status = -1;
        }
    }
    while (held) {
        SAVE_ERROR(e);
        PyObject* r = PyObject_CallNoArgs(self->release[--held]);
        if (r) {
            Py_DECREF(r);
            RESTORE_ERROR(e);
        } else if (status < 0) {
            PyErr_Clear();
            RESTORE_ERROR(e); /* the first error wins */
        } else {
            status = -1;
        }
    }
    if (ext != ext_stack) PyMem_Free(ext);
    return status;
}

/* Scratch of one call: every slot's address, and the device time of each Vulkan step. */
typedef struct {
    void* ptr_stack[STACK_N];
    uint64_t ns_stack[STACK_N];
    signed char has_stack[STACK_N];
    void** ptr;
    uint64_t* ns;
    signed char* has_ns;
} Scratch;

static int scratch_init(Runner* self, Scratch* s)
{
    s->ptr = self->n_slots <= STACK_N ? s->ptr_stack : PyMem_Malloc((size_t)self->n_slots * sizeof(void*));
    s->ns = self->n_vk <= STACK_N ? s->ns_stack : PyMem_Malloc((size_t)self->n_vk * sizeof(uint64_t));
    s->has_ns = self->n_vk <= STACK_N ? s->has_stack : PyMem_Malloc((size_t)self->n_vk);
    if (!s->ptr || !s->ns || !s->has_ns) return (PyErr_NoMemory(), -1);
    for (Py_ssize_t k = self->n_in + self->n_out; k < self->n_slots; k++) s->ptr[k] = self->slot_ptr[k];
    return 0;
}

static void scratch_free(Scratch* s)
{
    if (s->ptr && s->ptr != s->ptr_stack) PyMem_Free(s->ptr);
    if (s->ns && s->ns != s->ns_stack) PyMem_Free(s->ns);
    if (s->has_ns && s->has_ns != s->has_stack) PyMem_Free(s->has_ns);
}

static PyObject* ns_or_none(const Scratch* s, Py_ssize_t v)
{
    if (s->has_ns[v]) return PyLong_FromUnsignedLongLong(s->ns[v]);
    Py_RETURN_NONE;
}

static PyObject* runner_run(PyObject* self_, PyObject* const* args, Py_ssize_t nargs)
{
    Runner* self = (Runner*)self_;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "Runner.run(inputs, outputs, timed)");
        return NULL;
    }
    const int timed = PyObject_IsTrue(args[2]);
    if (timed < 0) return NULL;
    PyObject* ins = PySequence_Fast(args[0], "Runner.run: inputs must be a sequence");
    PyObject* outs = ins ? PySequence_Fast(args[1], "Runner.run: outputs must be a sequence") : NULL;
    PyObject* result = NULL;
    Scratch s; /* not zero-initialized: that would clear 6 KB of stack arrays per call (0.13 us) */
    Views w;
    s.ptr = NULL, s.ns = NULL, s.has_ns = NULL, w.v = NULL, w.got = 0;
    if (!outs) goto done;
    if (PySequence_Fast_GET_SIZE(ins) != self->n_in || PySequence_Fast_GET_SIZE(outs) != self->n_out) {
        PyErr_SetString(PyExc_ValueError, "Runner.run: wrong number of inputs or outputs");
        goto done;
    }
    if (scratch_init(self, &s) < 0 || views_init(&w, self->n_in + self->n_out) < 0) goto done;
    for (Py_ssize_t k = 0; k < self->n_in + self->n_out; k++) {
        const int out = k >= self->n_in;
        PyObject* a = out ? PySequence_Fast_GET_ITEM(outs, k - self->n_in) : PySequence_Fast_GET_ITEM(ins, k);
        if (PyObject_GetBuffer(a, &w.v[k], PyBUF_STRIDES | (out ? PyBUF_WRITABLE : 0)) < 0) goto done;
        w.got++;
        if (!PyBuffer_IsContiguous(&w.v[k], 'C') || (size_t)w.v[k].len != self->slot_bytes[k]) {
            PyErr_Format(PyExc_ValueError, "Runner.run: array %zd has %zd bytes or a strided layout, its slot %zu "
                         "bytes", k, w.v[k].len, self->slot_bytes[k]);
            goto done;
        }
        s.ptr[k] = w.v[k].buf;
    }
    const int status = execute(self, s.ptr, timed, s.ns, s.has_ns);
    if (status < 0) goto done;
    PyObject* ns = PyList_New(self->n_vk);
    if (!ns) goto done;
    for (Py_ssize_t v = 0; v < self->n_vk; v++) {
        /* a failing CPU graph stops the run: later Vulkan steps did not run */
        PyObject* o = status ? (Py_INCREF(Py_None), Py_None) : ns_or_none(&s, v);
        if (!o) {
            Py_DECREF(ns);
            goto done;
        }
        PyList_SET_ITEM(ns, v, o);
    }
    result = Py_BuildValue("(iN)", status, ns);
done:
    views_release(&w);
    scratch_free(&s);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return result;
}

static PyObject* runner_set_feed(PyObject* self_, PyObject* const* args, Py_ssize_t nargs)
{
    Runner* self = (Runner*)self_;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "Runner.set_feed(names, formats, shapes, outs, ndarray, empty, segments)");
        return NULL;
    }
    free_feed(self);
    PyObject* names = PySequence_Tuple(args[0]);
    PyObject* formats = names ? PySequence_Fast(args[1], "set_feed: formats must be a sequence") : NULL;
    PyObject* shapes = formats ? PySequence_Fast(args[2], "set_feed: shapes must be a sequence") : NULL;
    PyObject* outs = shapes ? PySequence_Fast(args[3], "set_feed: outs must be a sequence") : NULL;
    PyObject* result = NULL;
    if (!outs) goto done;
    if (PyTuple_GET_SIZE(names) != self->n_in || PySequence_Fast_GET_SIZE(formats) != self->n_in ||
        PySequence_Fast_GET_SIZE(shapes) != self->n_in || PySequence_Fast_GET_SIZE(outs) != self->n_out) {
        PyErr_SetString(PyExc_ValueError, "Runner.set_feed: one name, format and shape per input, (shape, dtype) "
                        "per output");
        goto done;
    }
    self->names = names;
    Py_INCREF(names);
    self->formats = PyMem_Calloc((size_t)self->n_in + 1, sizeof(char*));
    self->ndim = PyMem_Calloc((size_t)self->n_in + 1, sizeof(Py_ssize_t));
    self->dim_at = PyMem_Calloc((size_t)self->n_in + 1, sizeof(Py_ssize_t));
    self->out_shape = PyTuple_New(self->n_out);
    self->out_dtype = PyTuple_New(self->n_out);
    if (!self->formats || !self->ndim || !self->dim_at || !self->out_shape || !self->out_dtype) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < self->n_in; k++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "Runner.set_feed: input names must be str");
            goto done;
        }
        const char* f = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(formats, k));
        if (!f) goto done;
        if (!(self->formats[k] = PyMem_Malloc(strlen(f) + 1))) {
            PyErr_NoMemory();
            goto done;
        }
        strcpy(self->formats[k], f);
        const Py_ssize_t nd = PyObject_Length(PySequence_Fast_GET_ITEM(shapes, k));
        if (nd < 0) goto done;
        self->ndim[k] = nd;
        self->dim_at[k] = total;
        total += nd;
    }
    self->dims = PyMem_Calloc((size_t)total + 1, sizeof(Py_ssize_t));
    if (!self->dims) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < self->n_in; k++) {
        PyObject* sh = PySequence_Fast(PySequence_Fast_GET_ITEM(shapes, k), "set_feed: a shape must be a sequence");
        if (!sh) goto done;
        for (Py_ssize_t d = 0; d < self->ndim[k] && d < PySequence_Fast_GET_SIZE(sh); d++) {
            const Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sh, d));
            if (v < 0) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Runner.set_feed: negative dimension");
                Py_DECREF(sh);
                goto done;
            }
            self->dims[self->dim_at[k] + d] = v;
        }
        Py_DECREF(sh);
    }
    for (Py_ssize_t k = 0; k < self->n_out; k++) {
        PyObject* o = PySequence_Fast(PySequence_Fast_GET_ITEM(outs, k), "set_feed: outs are (shape, dtype)");
        if (!o) goto done;
        if (PySequence_Fast_GET_SIZE(o) != 2) {
            Py_DECREF(o);
            PyErr_SetString(PyExc_ValueError, "Runner.set_feed: outs are (shape, dtype)");
            goto done;
        }
        PyObject* shape = PySequence_Tuple(PySequence_Fast_GET_ITEM(o, 0));
        PyObject* dtype = PySequence_Fast_GET_ITEM(o, 1);
        Py_INCREF(dtype);
        Py_DECREF(o);
        if (!shape) {
            Py_DECREF(dtype);
            goto done;
        }
        PyTuple_SET_ITEM(self->out_shape, k, shape);
        PyTuple_SET_ITEM(self->out_dtype, k, dtype);
    }
    if (!(self->segs = PySequence_Tuple(args[6]))) goto done;
    self->ndarray = args[4];
    self->empty = args[5];
    Py_INCREF(self->ndarray);
    Py_INCREF(self->empty);
    self->feed_ready = 1;
    result = Py_None;
    Py_INCREF(result);
done:
    if (!result) free_feed(self);
    Py_XDECREF(names);
    Py_XDECREF(formats);
    Py_XDECREF(shapes);
    Py_XDECREF(outs);
    return result;
}

static PyObject* runner_run_feed(PyObject* self_, PyObject* feed)
{
    Runner* self = (Runner*)self_;
    if (!self->feed_ready) {
        PyErr_SetString(PyExc_RuntimeError, "Runner.run_feed before set_feed");
        return NULL;
    }
    if (!PyDict_CheckExact(feed) || PyDict_GET_SIZE(feed) != self->n_in) Py_RETURN_NONE;
    Scratch s; /* not zero-initialized: that would clear 6 KB of stack arrays per call (0.13 us) */
    Views w;
    s.ptr = NULL, s.ns = NULL, s.has_ns = NULL, w.v = NULL, w.got = 0;
    PyObject* outs = NULL;
    PyObject* result = NULL;
    if (scratch_init(self, &s) < 0 || views_init(&w, self->n_in + self->n_out) < 0) goto done;
    for (Py_ssize_t k = 0; k < self->n_in; k++) {
        PyObject* v = PyDict_GetItemWithError(feed, PyTuple_GET_ITEM(self->names, k));
        if (!v) {
            if (PyErr_Occurred()) goto done;
            goto other; /* a missing input: the checked path names it */
        }
        if ((PyObject*)Py_TYPE(v) != self->ndarray) goto other;
        Py_buffer* b = &w.v[k];
        if (PyObject_GetBuffer(v, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear(); /* strided: the checked path copies it */
            goto other;
        }
        w.got++;
        int ok = (size_t)b->len == self->slot_bytes[k] && b->ndim == self->ndim[k] && b->format &&
                 strcmp(b->format, self->formats[k]) == 0;
        const Py_ssize_t* dims = self->dims + self->dim_at[k];
        for (int d = 0; ok && d < b->ndim; d++) ok = b->shape[d] == dims[d];
        if (!ok) goto other;
        s.ptr[k] = b->buf;
    }
    if (!(outs = PyList_New(self->n_out))) goto done;
    for (Py_ssize_t k = 0; k < self->n_out; k++) {
        PyObject* a2[2] = {PyTuple_GET_ITEM(self->out_shape, k), PyTuple_GET_ITEM(self->out_dtype, k)};
        PyObject* a = PyObject_Vectorcall(self->empty, a2, 2, NULL);
        if (!a) goto done;
        PyList_SET_ITEM(outs, k, a);
        Py_buffer* b = &w.v[self->n_in + k];
        if (PyObject_GetBuffer(a, b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
        w.got++;
        if ((size_t)b->len != self->slot_bytes[self->n_in + k]) {
            PyErr_SetString(PyExc_RuntimeError, "internal: an output array differs from its slot");
            goto done;
        }
        s.ptr[self->n_in + k] = b->buf;
    }
    if (self->single) { /* a CPU session's whole model: what execute() does, without its generality (40 ns) */
        const Step* st = &self->steps[0];
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = st->fn(st->graph, s.ptr, st->threads);
        Py_END_ALLOW_THREADS
        result = status ? PyLong_FromLong(status) : outs;
        if (!status) outs = NULL;
        goto done;
    }
    int timed = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->segs) && !timed; i++) {
        PyObject* t = PyObject_GetAttr(PyTuple_GET_ITEM(self->segs, i), s_timed);
        if (!t) goto done;
        timed = PyObject_IsTrue(t);
        Py_DECREF(t);
        if (timed < 0) goto done;
    }
    const int status = execute(self, s.ptr, timed, s.ns, s.has_ns);
    if (status < 0) goto done;
    if (status) {
        result = PyLong_FromLong(status);
        goto done;
    }
    if (timed)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->segs) && i < self->n_vk; i++) {
            PyObject* o = ns_or_none(&s, i);
            const int rc = o ? PyObject_SetAttr(PyTuple_GET_ITEM(self->segs, i), s_last_device_ns, o) : -1;
            Py_XDECREF(o);
            if (rc < 0) goto done;
        }
    result = outs;
    outs = NULL;
    goto done;
other:
    result = Py_None;
    Py_INCREF(result);
done:
    views_release(&w);
    scratch_free(&s);
    Py_XDECREF(outs);
    return result;
}

static PyObject* runner_mapped(PyObject* self_, void* closure)
{
    (void)closure;
    return PyList_GetSlice(((Runner*)self_)->mapped, 0, PY_SSIZE_T_MAX);
}

static PyMethodDef runner_methods[] = {
    {"run", (PyCFunction)(void (*)(void))runner_run, METH_FASTCALL,
     "run(inputs, outputs, timed) -> (status, [device ns or None per Vulkan step])"},
    {"set_feed", (PyCFunction)(void (*)(void))runner_set_feed, METH_FASTCALL,
     "set_feed(names, formats, shapes, outs, ndarray, empty, segments): what run_feed checks a feed against"},
    {"run_feed", runner_run_feed, METH_O,
     "run_feed(feed) -> list of outputs, a CPU graph's nonzero status, or None for a feed the checked path must take"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef runner_getset[] = {
    {"mapped", runner_mapped, NULL,
     "intermediate slots a CPU graph writes straight into a Vulkan buffer's memory (no pack step)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vkinfer._planrun.Runner",
    .tp_basicsize = sizeof(Runner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = runner_new,
    .tp_dealloc = runner_dealloc,
    .tp_methods = runner_methods,
    .tp_getset = runner_getset,
    .tp_doc = "Runner(inputs, outputs, slot_bytes, persistent, steps, locks=(), carries=()): a whole plan in one native call",
};

/* address(obj) -> int: the data address of a C-contiguous buffer (a numpy array, read-only ones too), through the
 * buffer protocol: 0.1 us where ndarray.ctypes.data takes 1.2-2 and __array_interface__ 2 (a convolution's
 * descriptor takes four a node, 20% of a 100k-node QLinearConv chain's graph build). BufferError where the object
 * has no C-contiguous buffer. */
static PyObject* plain_address(PyObject* self, PyObject* obj)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject* out = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))plain_run, METH_FASTCALL, "run(fn, graph, buffers, sizes, threads) -> status"},
    {"address", plain_address, METH_O, "address(obj) -> the data address of a C-contiguous buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_planrun",
                                    "A compiled plan (CPU graphs and Vulkan steps) in one native call.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__planrun(void)
{
    if (PyType_Ready(&RunnerType) < 0) return NULL;
    if (!s_timed && !(s_timed = PyUnicode_InternFromString("timed"))) return NULL;
    if (!s_last_device_ns && !(s_last_device_ns = PyUnicode_InternFromString("last_device_ns"))) return NULL;
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
