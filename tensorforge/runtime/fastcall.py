"""The call of a static model in C: a small CPython extension, built once per machine.

Why: the Python call path (check each input, take the outputs, one ctypes call) costs 4-5 us per
call, which is most of a batch-1 MLP's time above its kernels.  The same steps in C cost well
under a microsecond.  ``Caller`` does exactly what ``NativeModel._run_in`` does for the common
case, an exact ``numpy.ndarray`` or ``torch.Tensor`` of the model's dtype and shape, contiguous,
on the CPU, with outputs small enough to come from ``np.empty`` (not the output pool); anything
else (a conversion, an error to explain, pooled outputs) returns ``NotImplemented`` and the
caller takes the Python path, which stays the one place with the error messages.

The extension is compiled from the source below with the system C compiler against this
Python's and NumPy's headers, cached under the compile cache keyed on the source, the Python ABI
and the NumPy version, and loaded with ``importlib``.  Where that is impossible (no compiler, no
``Python.h``: a deployment machine loading a ``.tfm``) the Python path is used, and nothing
fails.  ``TENSORFORGE_FASTCALL=0`` turns it off (to compare, or to debug).

It holds the model's arena pool, not the model: no reference cycle keeps a dropped model alive.
The GIL is released while the kernels run, as ctypes does.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TensorforgeError

MODULE = "_tensorforge_fastcall"
MAX_ARGS = 64          # inputs or outputs of a model the C path takes (more: the Python path)
MAX_RANK = 16
BUILD_TIMEOUT_S = 120

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>

#define MAX_ARGS %(MAX_ARGS)d
#define MAX_RANK %(MAX_RANK)d

typedef void (*run_fn)(void *const *, void *const *, char *, const char *);
typedef int (*get_threads_fn)(void);
typedef void (*set_threads_fn)(int);

typedef struct {
    int ndim;
    npy_intp dims[MAX_RANK];
    int typenum;
    PyObject *torch_dtype;             /* owned; NULL until torch is seen */
} Spec;

typedef struct {
    PyObject_HEAD
    run_fn run;
    get_threads_fn get_threads;
    set_threads_fn set_threads;
    int threads;
    int n_in, n_out;
    Spec in[MAX_ARGS], out[MAX_ARGS];
    PyObject *acquire, *release;       /* the arena pool's bound methods */
    PyObject *lib_threads, *handle;    /* the dict of threads applied per library, and its key */
    PyObject *torch_tensor, *from_numpy;
} Caller;

static PyObject *s_raw, *s_dtype, *s_shape, *s_is_cpu, *s_is_contiguous, *s_data_ptr;

static void caller_dealloc(Caller *self) {
    for (int i = 0; i < self->n_in; i++) Py_XDECREF(self->in[i].torch_dtype);
    Py_XDECREF(self->acquire); Py_XDECREF(self->release);
    Py_XDECREF(self->lib_threads); Py_XDECREF(self->handle);
    Py_XDECREF(self->torch_tensor); Py_XDECREF(self->from_numpy);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int read_spec(PyObject *t, Spec *s) {
    /* (shape tuple, numpy type number) */
    PyObject *shape; int typenum;
    if (!PyArg_ParseTuple(t, "O!i", &PyTuple_Type, &shape, &typenum)) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    if (n > MAX_RANK) { PyErr_SetString(PyExc_ValueError, "rank too high"); return -1; }
    s->ndim = (int)n;
    s->typenum = typenum;
    s->torch_dtype = NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        s->dims[k] = (npy_intp)PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        if (s->dims[k] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static int read_specs(PyObject *seq, Spec *specs, int *n) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > MAX_ARGS) {
        PyErr_SetString(PyExc_ValueError, "specs: a tuple of at most MAX_ARGS");
        return -1;
    }
    *n = (int)PyTuple_GET_SIZE(seq);
    for (int i = 0; i < *n; i++)
        if (read_spec(PyTuple_GET_ITEM(seq, i), &specs[i]) < 0) return -1;
    return 0;
}

static PyObject *caller_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    unsigned long long run, get, set;
    int threads;
    PyObject *ins, *outs, *acquire, *release, *lib_threads, *handle;
    if (!PyArg_ParseTuple(args, "KKKiOOOOOO", &run, &get, &set, &threads, &ins, &outs, &acquire, &release,
                          &lib_threads, &handle))
        return NULL;
    Caller *self = (Caller *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->run = (run_fn)(uintptr_t)run;
    self->get_threads = (get_threads_fn)(uintptr_t)get;
    self->set_threads = (set_threads_fn)(uintptr_t)set;
    self->threads = threads;
    if (read_specs(ins, self->in, &self->n_in) < 0 || read_specs(outs, self->out, &self->n_out) < 0) {
        self->n_in = 0;
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(acquire); self->acquire = acquire;
    Py_INCREF(release); self->release = release;
    Py_INCREF(lib_threads); self->lib_threads = lib_threads;
    Py_INCREF(handle); self->handle = handle;
    return (PyObject *)self;
}

/* The data address of input x if it matches spec s exactly, else NULL (take the Python path). */
static void *numpy_input(PyObject *x, const Spec *s) {
    PyArrayObject *a = (PyArrayObject *)x;
    if (PyArray_TYPE(a) != s->typenum || PyArray_NDIM(a) != s->ndim || !PyArray_ISNOTSWAPPED(a) ||
        !PyArray_IS_C_CONTIGUOUS(a))
        return NULL;
    const npy_intp *d = PyArray_DIMS(a);
    for (int k = 0; k < s->ndim; k++)
        if (d[k] != s->dims[k]) return NULL;
    return PyArray_DATA(a);
}

static int is_true_attr(PyObject *x, PyObject *name) {
    PyObject *v = PyObject_GetAttr(x, name);
    if (!v) { PyErr_Clear(); return 0; }
    int r = v == Py_True;
    Py_DECREF(v);
    return r;
}

static int is_true_call(PyObject *x, PyObject *name) {
    PyObject *v = PyObject_CallMethodNoArgs(x, name);
    if (!v) { PyErr_Clear(); return 0; }
    int r = v == Py_True;
    Py_DECREF(v);
    return r;
}

static void *torch_input(PyObject *x, const Spec *s) {
    if (!s->torch_dtype) return NULL;
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (!dt) { PyErr_Clear(); return NULL; }
    int same = dt == s->torch_dtype;
    Py_DECREF(dt);
    if (!same) return NULL;
    PyObject *shape = PyObject_GetAttr(x, s_shape);
    if (!shape) { PyErr_Clear(); return NULL; }
    int ok = PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == s->ndim;
    for (int k = 0; ok && k < s->ndim; k++) {
        PyObject *v = PyTuple_GET_ITEM(shape, k);
        ok = PyLong_Check(v) && PyLong_AsSsize_t(v) == s->dims[k];
    }
    Py_DECREF(shape);
    if (PyErr_Occurred()) { PyErr_Clear(); return NULL; }
    if (!ok || !is_true_attr(x, s_is_cpu) || !is_true_call(x, s_is_contiguous)) return NULL;
    PyObject *p = PyObject_CallMethodNoArgs(x, s_data_ptr);
    if (!p) { PyErr_Clear(); return NULL; }
    void *addr = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (PyErr_Occurred()) { PyErr_Clear(); return NULL; }
    return addr;
}

static int arena_pointers(PyObject *arena, void ***in_ptrs, void ***out_ptrs, char **buffer, const char **weights) {
    PyObject *raw = PyObject_GetAttr(arena, s_raw);
    if (!raw) return -1;
    if (!PyTuple_Check(raw) || PyTuple_GET_SIZE(raw) != 4) {
        Py_DECREF(raw);
        PyErr_SetString(PyExc_TypeError, "arena.raw: 4 addresses");
        return -1;
    }
    *in_ptrs = (void **)PyLong_AsVoidPtr(PyTuple_GET_ITEM(raw, 0));
    *out_ptrs = (void **)PyLong_AsVoidPtr(PyTuple_GET_ITEM(raw, 1));
    *buffer = (char *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(raw, 2));
    *weights = (const char *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(raw, 3));
    Py_DECREF(raw);
    return PyErr_Occurred() ? -1 : 0;
}

/* caller(inputs: tuple) -> output, tuple of outputs, or NotImplemented (take the Python path) */
static PyObject *caller_call(Caller *self, PyObject *args, PyObject *kw) {
    PyObject *inputs;
    if (kw || PyTuple_GET_SIZE(args) != 1 || !PyTuple_Check(inputs = PyTuple_GET_ITEM(args, 0)) ||
        PyTuple_GET_SIZE(inputs) != self->n_in)
        Py_RETURN_NOTIMPLEMENTED;
    void *in[MAX_ARGS];
    int as_torch = 0;
    for (int i = 0; i < self->n_in; i++) {
        PyObject *x = PyTuple_GET_ITEM(inputs, i);
        if (PyArray_CheckExact(x)) {
            in[i] = numpy_input(x, &self->in[i]);
        } else if (self->torch_tensor && (PyObject *)Py_TYPE(x) == self->torch_tensor) {
            in[i] = torch_input(x, &self->in[i]);
            as_torch = 1;
        } else {
            in[i] = NULL;
        }
        if (!in[i]) Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *outs[MAX_ARGS];
    for (int j = 0; j < self->n_out; j++) {
        outs[j] = PyArray_SimpleNew(self->out[j].ndim, self->out[j].dims, self->out[j].typenum);
        if (!outs[j]) {
            PyErr_Clear();
            for (int k = 0; k < j; k++) Py_DECREF(outs[k]);
            Py_RETURN_NOTIMPLEMENTED;          /* the Python path says what did not fit */
        }
    }
    PyObject *arena = PyObject_CallNoArgs(self->acquire);
    void **in_ptrs, **out_ptrs; char *buffer; const char *weights;
    if (!arena || arena_pointers(arena, &in_ptrs, &out_ptrs, &buffer, &weights) < 0) {
        if (arena) {
            PyObject *r = PyObject_CallOneArg(self->release, arena);
            Py_XDECREF(r);
            Py_DECREF(arena);
        }
        for (int j = 0; j < self->n_out; j++) Py_DECREF(outs[j]);
        return NULL;
    }
    for (int i = 0; i < self->n_in; i++) in_ptrs[i] = in[i];
    for (int j = 0; j < self->n_out; j++) out_ptrs[j] = PyArray_DATA((PyArrayObject *)outs[j]);
    if (self->get_threads() != self->threads) {
        self->set_threads(self->threads);
        PyObject *n = PyLong_FromLong(self->threads);
        if (!n || PyDict_SetItem(self->lib_threads, self->handle, n) < 0) PyErr_Clear();
        Py_XDECREF(n);
    }
    Py_BEGIN_ALLOW_THREADS
    self->run((void *const *)in_ptrs, (void *const *)out_ptrs, buffer, weights);
    Py_END_ALLOW_THREADS
    PyObject *r = PyObject_CallOneArg(self->release, arena);
    Py_DECREF(arena);
    if (!r) {
        for (int j = 0; j < self->n_out; j++) Py_DECREF(outs[j]);
        return NULL;
    }
    Py_DECREF(r);
    if (as_torch) {
        for (int j = 0; j < self->n_out; j++) {
            PyObject *t = PyObject_CallOneArg(self->from_numpy, outs[j]);
            Py_DECREF(outs[j]);
            outs[j] = t;
            if (!t) {
                for (int k = 0; k < self->n_out; k++) if (k != j) Py_XDECREF(outs[k]);
                return NULL;
            }
        }
    }
    if (self->n_out == 1) return outs[0];
    PyObject *tuple = PyTuple_New(self->n_out);
    if (!tuple) {
        for (int j = 0; j < self->n_out; j++) Py_DECREF(outs[j]);
        return NULL;
    }
    for (int j = 0; j < self->n_out; j++) PyTuple_SET_ITEM(tuple, j, outs[j]);
    return tuple;
}

static PyObject *caller_set_threads(Caller *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    self->threads = (int)n;
    Py_RETURN_NONE;
}

/* set_torch(torch.Tensor, torch.from_numpy, (dtype per input, ...)): torch tensors take the C path */
static PyObject *caller_set_torch(Caller *self, PyObject *args) {
    PyObject *tensor, *from_numpy, *dtypes;
    if (!PyArg_ParseTuple(args, "OOO!", &tensor, &from_numpy, &PyTuple_Type, &dtypes)) return NULL;
    if (PyTuple_GET_SIZE(dtypes) != self->n_in) {
        PyErr_SetString(PyExc_ValueError, "one torch dtype per input");
        return NULL;
    }
    Py_INCREF(tensor); Py_XSETREF(self->torch_tensor, tensor);
    Py_INCREF(from_numpy); Py_XSETREF(self->from_numpy, from_numpy);
    for (int i = 0; i < self->n_in; i++) {
        PyObject *d = PyTuple_GET_ITEM(dtypes, i);
        Py_INCREF(d);
        Py_XSETREF(self->in[i].torch_dtype, d);
    }
    Py_RETURN_NONE;
}

static PyMethodDef caller_methods[] = {
    {"set_threads", (PyCFunction)caller_set_threads, METH_O, "threads of later calls"},
    {"set_torch", (PyCFunction)caller_set_torch, METH_VARARGS, "accept torch tensors"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_tensorforge_fastcall.Caller",
    .tp_basicsize = sizeof(Caller),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = caller_new,
    .tp_dealloc = (destructor)caller_dealloc,
    .tp_call = (ternaryfunc)caller_call,
    .tp_methods = caller_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tensorforge_fastcall", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__tensorforge_fastcall(void) {
    import_array();
    if (PyType_Ready(&CallerType) < 0) return NULL;
    s_raw = PyUnicode_InternFromString("raw");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_shape = PyUnicode_InternFromString("shape");
    s_is_cpu = PyUnicode_InternFromString("is_cpu");
    s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CallerType);
    if (PyModule_AddObject(m, "Caller", (PyObject *)&CallerType) < 0) return NULL;
    return m;
}
""" % {"MAX_ARGS": MAX_ARGS, "MAX_RANK": MAX_RANK}

_lock = threading.Lock()
_module: Any = None
_failure: str | None = None       # why the extension is unavailable (once tried)


def enabled() -> bool:
    return os.environ.get("TENSORFORGE_FASTCALL", "1") not in ("0", "false", "no", "off")


def _library_name() -> str:
    key = "\n".join([SOURCE, sys.version, sys.implementation.cache_tag or "", np.__version__,
                     sysconfig.get_platform()])
    return f"{MODULE}-{hashlib.sha256(key.encode()).hexdigest()[:16]}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def _build(out: Path) -> None:
    include = sysconfig.get_paths().get("include") or ""
    if not (Path(include) / "Python.h").exists():
        raise ImportError(f"no Python.h under {include!r} (install the Python development headers)")
    from ..codegen.target import default_compiler
    cc = default_compiler()
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name + f".{os.getpid()}.c")
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    src.write_text(SOURCE)
    try:
        proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", include, "-I", np.get_include(), str(src),
                               "-o", str(tmp)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise ImportError(f"{cc} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, out)
    finally:
        for p in (src, tmp):
            try:
                p.unlink()
            except OSError:
                pass


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def extension():
    """The loaded extension module, built on first use; None where it cannot be (``failure()``)."""
    global _module, _failure
    if _module is not None or _failure is not None:
        return _module
    with _lock:
        if _module is not None or _failure is not None:
            return _module
        from ..codegen.c.toolchain import cached_file, in_writable_cache
        relative = Path("fastcall") / _library_name()
        try:
            path = cached_file(relative)
            if path is None:
                def build(root: Path) -> Path:
                    _build(root / relative)
                    return root / relative
                path = in_writable_cache(build, "the C call path extension")
            _module = _load(path)
        except (OSError, ImportError, subprocess.SubprocessError, TensorforgeError) as exc:
            _failure = f"{type(exc).__name__}: {exc}"
    return _module


def failure() -> str | None:
    """Why the C call path is unavailable in this process (None: available or not tried)."""
    return _failure
