"""Helpers the front and its device half share: warnings that point at the caller's line, dtype rules."""

import sys
import warnings

import numpy as np

INT32_MAX = 2**31 - 1
_PACKAGE_DIR = __file__.rsplit("/", 1)[0]


def stacklevel():
    """The stacklevel of the first frame outside this package (a warning points at the caller's line)."""
    level, f = 1, sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, f = level + 1, f.f_back
    return level


def promoted(dtype_name, what):
    warnings.warn(f"spcg: {what} is {dtype_name}: promoted to float64 (spcg computes in float64)", UserWarning,
                  stacklevel=stacklevel())


def complex_refused(dtype_name, what):
    return TypeError(f"{what} is complex ({dtype_name}): spcg solves real symmetric positive definite systems only")


def check_dtype(dtype, what):
    """NumPy (and CuPy, whose dtypes are NumPy's) dtypes: float64 as is, other floats promoted with a warning,
    integers and bool converted silently, complex and anything else refused."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        raise complex_refused(dtype, what)
    if dtype == np.float64:
        return
    if np.issubdtype(dtype, np.floating):
        promoted(dtype, what)
    elif not (np.issubdtype(dtype, np.integer) or dtype == np.bool_):
        raise TypeError(f"{what} has dtype {dtype}: expected real numbers (float64, or one promoted to it)")


def size_refusal(what, rows, cols, nnz):
    """The refusal of sizes spcg's int32 indices cannot hold (None when they fit)."""
    if rows > INT32_MAX or cols > INT32_MAX or nnz > INT32_MAX:
        return ValueError(f"{what} is {rows} x {cols} with {nnz} stored entries: spcg's indices are int32, "
                          f"so rows, columns and entries must each be at most {INT32_MAX}")
    return None
