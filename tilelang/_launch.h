/* tilelang._launch's shared declarations: the Launcher and the packing of parameters
   (tilelang/_launch.c), which the fast path and call sites (tilelang/_fast_path.c) use. */

#ifndef TILELANG_LAUNCH_H
#define TILELANG_LAUNCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

typedef int (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*ContextGetFn)(void **);
typedef int (*ContextSetFn)(void *);
typedef int (*EncodeFn)(void *, int, unsigned, void *, const uint64_t *, const uint64_t *, const uint32_t *,
                        const uint32_t *, int, int, int, int);

#define MAX_MAPS 8
#define MAX_RANK 5
#define MAX_ALIGNED (MAX_PARAMS / 3) /* an array is three parameters or more: never the limit */

typedef struct {
    Py_ssize_t param; /* the array's pointer parameter; its shape and strides follow */
    unsigned rank, itemsize;
} AlignedSpec;

typedef struct {
    Py_ssize_t param; /* the array's pointer parameter; its shape and strides follow */
    unsigned rank, swizzle, itemsize; /* itemsize: 1 or 2 bytes */
    uint32_t box[MAX_RANK];           /* innermost first */
} MapSpec;

#define MAX_PARAMS 1024
#define MAX_BYTES 4096 /* the driver's limit on a kernel's parameters before CUDA 12.1 */

typedef struct {
    PyObject_HEAD
    LaunchFn launch;
    ContextGetFn context_get;
    ContextSetFn context_set;
    void *function, *context;
    unsigned threads, shared;
    Py_ssize_t count;
    char codes[MAX_PARAMS];
    uint16_t offsets[MAX_PARAMS];
    PyObject *failed, *kernel;
    Py_ssize_t map_count;
    MapSpec maps[MAX_MAPS];
    EncodeFn encode;
    Py_ssize_t aligned_count;
    AlignedSpec aligned[MAX_ALIGNED];
    PyObject *general; /* a callable returning a Launcher, until called; then that Launcher */
    vectorcallfunc vectorcall;
} Launcher;

/* The common part of the three types: called through vectorcall (no argument tuple). */
#define CALLABLE_TYPE(name)                                                                      \
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilelang._launch." #name, .tp_basicsize = sizeof(name), \
    .tp_vectorcall_offset = offsetof(name, vectorcall), .tp_call = PyVectorcall_Call

typedef struct {
    _Alignas(16) char bytes[MAX_BYTES];
    Py_ssize_t filled; /* parameters written so far */
} Params;

#define HIDDEN __attribute__((visibility("hidden"))) /* (shared between the two files, not exported) */

extern HIDDEN PyTypeObject LauncherType;

/* The next parameter; 0 and an exception when there is none or it does not convert. */
HIDDEN int push(Launcher *self, Params *params, PyObject *value);
/* cuLaunchKernel (or the general kernel's) with the parameters packed; a new reference to None or NULL. */
HIDDEN PyObject *launch(Launcher *self, const unsigned grid[3], void *stream, Params *params);
/* A grid tuple of three sizes into ``out``; 0 and an exception if it is not one. */
HIDDEN int read_grid(PyObject *grid, unsigned out[3]);

#endif
