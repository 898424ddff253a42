"""A stand-in for CuPy on NumPy, for host tests of spcg's CuPy path (python/spcg/_device.py): its classes carry
CuPy's module names, so spcg takes them for CuPy objects, and only the API spcg uses is here. Its "device"
pointers are host addresses: tests use it only where no GPU is usable, where the library refuses a device input
(CudaError) before it reads any pointer. The real CuPy tests (test_device.py) run where there is a GPU.
"""

import types

import numpy as np
import scipy.sparse


class _Device:
    def __init__(self, id):
        self.id = id


class _Memory:
    def __init__(self, ptr):
        self.ptr = ptr


class ndarray(np.ndarray):
    """cupy.ndarray: .device.id and .data.ptr as CuPy has them."""

    @property
    def device(self):
        return _Device(state.array_device)

    @property
    def data(self):
        return _Memory(self.__array_interface__["data"][0])


ndarray.__module__ = "cupy"


class _State:
    def __init__(self):
        self.current_device = 0  # what cupy.cuda.runtime.getDevice() answers
        self.array_device = 0    # the device every array says it is on
        self.synchronized = 0    # calls of cupy.cuda.get_current_stream().synchronize()


state = _State()


def _wrap(a):
    return np.asarray(a).view(ndarray)


def asarray(a, dtype=None):
    return _wrap(np.asarray(a, dtype=dtype))


def ascontiguousarray(a, dtype=None):
    return _wrap(np.ascontiguousarray(a, dtype=dtype))


def asfortranarray(a):
    return _wrap(np.asfortranarray(a))


def zeros(shape, dtype=np.float64):
    return _wrap(np.zeros(shape, dtype))


def zeros_like(a):
    return _wrap(np.zeros_like(a))


def arange(start, stop, dtype=None):
    return _wrap(np.arange(start, stop, dtype=dtype))


def isfinite(a):
    return np.isfinite(a)


int32, int64, float32, float64 = np.int32, np.int64, np.float32, np.float64


class _Stream:
    def synchronize(self):
        state.synchronized += 1


cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: state.current_device),
                             get_current_stream=lambda: _Stream())


class _Sparse:
    """cupyx.scipy.sparse's matrices over a SciPy matrix whose arrays are shown as (fake) CuPy arrays, views of the
    same memory."""

    def __init__(self, m):
        self._m = m

    shape = property(lambda self: self._m.shape)
    nnz = property(lambda self: self._m.nnz)
    dtype = property(lambda self: self._m.dtype)
    indptr = property(lambda self: _wrap(self._m.indptr))
    indices = property(lambda self: _wrap(self._m.indices))
    data = property(lambda self: _wrap(self._m.data))


class csr_matrix(_Sparse):
    format = "csr"

    def __init__(self, arg, shape=None):
        if isinstance(arg, _Sparse):
            m = arg._m.tocsr()
        elif isinstance(arg, tuple):
            m = scipy.sparse.csr_matrix(tuple(np.asarray(a) for a in arg), shape=shape)
        elif scipy.sparse.issparse(arg):  # CuPy uploads a SciPy matrix: new arrays
            m = arg.tocsr(copy=True)
        else:
            m = scipy.sparse.csr_matrix(np.asarray(arg))
        super().__init__(m)

    @property
    def has_canonical_format(self):
        return self._m.has_canonical_format

    def copy(self):
        return csr_matrix(self._m.copy())

    def sum_duplicates(self):
        self._m.sum_duplicates()

    def tocsr(self):
        return self


class coo_matrix(_Sparse):
    format = "coo"

    def __init__(self, m):
        super().__init__(scipy.sparse.coo_matrix(m))

    def tocsr(self):
        return csr_matrix(self._m.tocsr())


csr_matrix.__module__ = "cupyx.scipy.sparse._csr"
coo_matrix.__module__ = "cupyx.scipy.sparse._coo"


def issparse(x):
    return isinstance(x, _Sparse)


def modules():
    """sys.modules entries that make `import cupy` and `import cupyx.scipy.sparse` find this stand-in."""
    cupy = types.ModuleType("cupy")
    for name in ("ndarray", "asarray", "ascontiguousarray", "asfortranarray", "zeros", "zeros_like", "arange",
                 "isfinite", "int32", "int64", "float32", "float64", "cuda"):
        setattr(cupy, name, globals()[name])
    sparse = types.ModuleType("cupyx.scipy.sparse")
    sparse.csr_matrix, sparse.coo_matrix, sparse.issparse = csr_matrix, coo_matrix, issparse
    cupyx, scipy_ = types.ModuleType("cupyx"), types.ModuleType("cupyx.scipy")
    cupyx.scipy, scipy_.sparse = scipy_, sparse
    return {"cupy": cupy, "cupyx": cupyx, "cupyx.scipy": scipy_, "cupyx.scipy.sparse": sparse}
