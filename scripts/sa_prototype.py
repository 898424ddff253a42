#!/usr/bin/env python3
# SciPy prototype of spcg's SA-AMG hierarchy (same MIS-2 rule, P smoothing, Chebyshev steps) on 2D/3D Poisson:
# the V-cycle contraction for smoother and prolongator variants (docs/perf-notes.md, "The V-cycle's contraction").
# Needs NumPy and SciPy (the device machine has them):  python3 scripts/sa_prototype.py
import numpy as np, scipy.sparse as sp, scipy.sparse.linalg as spl
M64 = (1 << 64) - 1
def prio(i, seed=0):
    z = (i + 0x9E3779B97F4A7C15 * (seed + 1)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)
def poisson2d(m):
    T = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(m, m))
    I = sp.identity(m)
    return (sp.kron(I, T) + sp.kron(T, I)).tocsr()
def aggregate(A, seed=0):
    n = A.shape[0]; G = A.copy(); G.setdiag(0); G.eliminate_zeros(); G = G.tocsr()
    pr = [prio(i, seed) for i in range(n)]
    state = [1] * n
    while True:
        t = [(state[i], pr[i], i) for i in range(n)]
        for _ in range(2):
            t2 = []
            for i in range(n):
                m = t[i]
                for j in G.indices[G.indptr[i]:G.indptr[i+1]]:
                    if t[j] > m: m = t[j]
                t2.append(m)
            t = t2
        und = 0
        for i in range(n):
            if state[i] != 1: continue
            if t[i][2] == i: state[i] = 2
            elif t[i][0] == 2: state[i] = 0
            else: und += 1
        if und == 0: break
    of = [-1] * n; c = 0
    for i in range(n):
        if state[i] == 2: of[i] = c; c += 1
    for _ in range(2):
        before = list(of)
        for i in range(n):
            if before[i] >= 0: continue
            best = None
            for j in G.indices[G.indptr[i]:G.indptr[i+1]]:
                if before[j] < 0: continue
                k = (pr[j], j)
                if best is None or k > best: best = k
            if best: of[i] = before[best[1]]
    return np.array(of), c
def lmax(A):
    D = A.diagonal(); S = sp.diags(1/np.sqrt(D)) @ A @ sp.diags(1/np.sqrt(D))
    return spl.eigsh(S, 1, which='LA')[0][0]
def cheb_coeffs(lo, hi, d):
    th, de = (hi+lo)/2, (hi-lo)/2; sg = th/de; rho = 1/sg; c = [(0, 1/th)]
    for i in range(1, d):
        rn = 1/(2*sg - rho); c.append((rn*rho, 2*rn/de)); rho = rn
    return c
def build(A, coarse=100, omega_f=4/3, smooth_p=1, safety=1.1):
    levels = []
    while A.shape[0] > coarse:
        of, c = aggregate(A)
        n = A.shape[0]; size = np.bincount(of, minlength=c)
        P0 = sp.csr_matrix((1/np.sqrt(size[of]), (np.arange(n), of)), shape=(n, c))
        lm = safety * lmax(A); Dinv = sp.diags(1/A.diagonal())
        P = P0
        for _ in range(smooth_p): P = P - (omega_f/lm) * (Dinv @ (A @ P))
        levels.append(dict(A=A, P=P.tocsr(), lm=lm, Dinv=A.diagonal()))
        A = (P.T @ A @ P).tocsr()
    levels.append(dict(A=A, inv=np.linalg.inv(A.toarray())))
    return levels
def smooth(L, b, x, kind, d, ratio):
    A = L['A']; dg = L['Dinv']
    if kind == 'cheb':
        coeffs = cheb_coeffs(L['lm']/ratio, L['lm'], d); r = b - A @ x; dv = np.zeros_like(b)
        for i, (c1, c2) in enumerate(coeffs):
            if i > 0: r = r - A @ dv
            dv = c1 * dv + c2 * r / dg; x = x + dv
        return x
    if kind == 'sgs':
        Lw = sp.tril(A, 0).tocsr(); Up = sp.triu(A, 0).tocsr()
        for _ in range(d):
            x = x + spl.spsolve_triangular(Lw, b - A @ x, lower=True)
            x = x + spl.spsolve_triangular(Up, b - A @ x, lower=False)
        return x
def vcycle(levels, l, b, kind, d, ratio):
    L = levels[l]
    if 'inv' in L: return L['inv'] @ b
    x = smooth(L, b, np.zeros_like(b), kind, d, ratio)
    r = b - L['A'] @ x
    x = x + L['P'] @ vcycle(levels, l+1, L['P'].T @ r, kind, d, ratio)
    if kind == 'sgs':  # reverse order for symmetry
        Lw = sp.tril(L['A'], 0).tocsr(); Up = sp.triu(L['A'], 0).tocsr()
        for _ in range(d):
            x = x + spl.spsolve_triangular(Up, b - L['A'] @ x, lower=False)
            x = x + spl.spsolve_triangular(Lw, b - L['A'] @ x, lower=True)
        return x
    return smooth(L, b, x, kind, d, ratio)
def contraction(levels, kind, d, ratio):
    A = levels[0]['A']; rng = np.random.default_rng(5); e = rng.uniform(-1, 1, A.shape[0])
    an = lambda v: np.sqrt(v @ (A @ v)); before = an(e)
    for _ in range(6):
        e = e - vcycle(levels, 0, A @ e, kind, d, ratio); after = an(e); ratio_ = after/before; before = after
    return ratio_
A = poisson2d(64)
for om, sm, sf in ((4/3, 1, 1.0), (1.5, 1, 1.0), (1.7, 1, 1.0), (4/3, 2, 1.1), (1.5, 2, 1.0)):
    lv = build(A, omega_f=om, smooth_p=sm, safety=sf)
    print('omega %.2f/lmax safety %.1f smoothings %d levels %s nnz %s' % (om, sf, sm, [L['A'].shape[0] for L in lv], [L['A'].nnz for L in lv]),
          'cheb2/20 %.3f cheb3/20 %.3f cheb3/8 %.3f sgs1 %.3f' % (
          contraction(lv,'cheb',2,20), contraction(lv,'cheb',3,20), contraction(lv,'cheb',3,8), contraction(lv,'sgs',1,0)), flush=True)
A3 = (lambda m: (sp.kron(sp.kron(sp.identity(m), sp.identity(m)), sp.diags([-1,2,-1],[-1,0,1],shape=(m,m))) + sp.kron(sp.kron(sp.identity(m), sp.diags([-1,2,-1],[-1,0,1],shape=(m,m))), sp.identity(m)) + sp.kron(sp.kron(sp.diags([-1,2,-1],[-1,0,1],shape=(m,m)), sp.identity(m)), sp.identity(m))).tocsr())(16)
for om, sm, sf in ((4/3, 1, 1.1), (4/3, 2, 1.1)):
    lv = build(A3, omega_f=om, smooth_p=sm, safety=sf)
    print('3D omega %.2f safety %.1f smoothings %d levels %s nnz %s' % (om, sf, sm, [L['A'].shape[0] for L in lv], [L['A'].nnz for L in lv]),
          'cheb2/20 %.3f cheb3/20 %.3f cheb3/8 %.3f' % (contraction(lv,'cheb',2,20), contraction(lv,'cheb',3,20), contraction(lv,'cheb',3,8)), flush=True)
