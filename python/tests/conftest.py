# Shared fixtures: the host backend's warning silenced (it is tested on its own), matrices, the device check.
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import spcg


@pytest.fixture(autouse=True)
def _quiet_host_backend():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spcg.HostBackendWarning)
        yield


@pytest.fixture
def poisson():
    return spcg.generate("poisson2d:24")  # 576 rows


@pytest.fixture
def random_spd():
    """A random sparse SPD matrix: B B^T + n I with B sparse, in COO with unsorted entries."""
    rng = np.random.default_rng(7)
    n = 300
    B = sp.random(n, n, density=0.02, random_state=rng, format="csr")
    A = (B @ B.T + n * sp.identity(n)).tocoo()
    order = rng.permutation(A.nnz)
    return sp.coo_matrix((A.data[order], (A.row[order], A.col[order])), shape=A.shape)


def relres(A, x, b):
    """||b - A x|| / ||b|| per column (a vector: a number)."""
    r = b - A @ x
    return np.linalg.norm(r, axis=0) / np.linalg.norm(b, axis=0)


def gpu_available():
    ok, _ = spcg._spcg.device_available()
    return ok


def unchecked_torch_csr(torch, crow, col, values, size, device=None):
    """A torch sparse CSR tensor built without torch's invariant checks (unsorted or duplicate columns stay as
    given): torch 1.13 checks always unless its _unsafe constructor is used; torch >= 2 takes check_invariants."""
    if hasattr(torch, "_sparse_csr_tensor_unsafe"):
        t = torch._sparse_csr_tensor_unsafe(crow, col, values, size)
        return t if device is None else t.to(device)
    return torch.sparse_csr_tensor(crow, col, values, size, device=device, check_invariants=False)


def duplicated(poisson):
    """poisson's CSR arrays with every entry twice (halves), each row's columns unsorted: (data, indices, indptr)."""
    n = poisson.shape[0]
    coo = poisson.tocoo()
    rows = np.concatenate([coo.row, coo.row])
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int32)
    return (np.concatenate([coo.data / 2, coo.data / 2])[order],
            np.concatenate([coo.col, coo.col])[order].astype(np.int32), indptr)
