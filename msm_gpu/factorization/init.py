"""Starting factors for NMF, as scikit-learn builds them (``sklearn.decomposition.NMF``).

``init`` (scikit-learn's names and rules, checked against scikit-learn 1.9):

* ``None``: ``"nndsvda"`` if ``k <= min(m, d)``, else ``"random"``.
* ``"random"``: ``sqrt(mean(Y) / k) |N(0, 1)|`` entries, H drawn before W.
* ``"nndsvd"``: Nonnegative Double SVD (Boutsidis and Gallopoulos 2008) from the k leading
  singular triplets of Y (scikit-learn's randomized SVD); entries below ``eps`` set to 0.
* ``"nndsvda"``: NNDSVD with its zeros replaced by mean(Y).
* ``"nndsvdar"``: NNDSVD with its zeros replaced by ``mean(Y) |N(0, 1)| / 100``.

For an int, None or ``RandomState`` seed the numbers are those of scikit-learn's own
``_initialize_nmf`` with the same seed; a ``numpy.random.Generator`` is used directly.
The factors are built on the host (NumPy) in Y's dtype; the caller moves them to its
backend.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from ..arrays import is_cupy

INITS = (None, "random", "nndsvd", "nndsvda", "nndsvdar", "custom")


def check_init(init):
    """Refuse an unknown ``init`` with a ValueError that lists the accepted ones."""
    if init is not None and not (isinstance(init, str) and init in INITS):
        names = ", ".join(repr(i) for i in INITS)
        raise ValueError(f"init must be one of {names}, got {init!r}")
    return init


def resolve_init(init, k, shape):
    """The init actually used: scikit-learn's default rule for ``init=None``.

    Raises ValueError for an NNDSVD variant with ``k > min(m, d)`` (as scikit-learn).
    """
    m, d = shape
    if init is None:
        return "nndsvda" if k <= min(m, d) else "random"
    if init.startswith("nndsvd") and k > min(m, d):
        raise ValueError(
            f"init={init!r} can only be used when n_components <= min(n_samples, n_features) "
            f"= {min(m, d)}, got n_components = {k}; use init='random'"
        )
    return init


def random_source(random_state):
    """A ``RandomState`` (scikit-learn's stream) or the given ``Generator``."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return random_state
    if random_state is None or (
        isinstance(random_state, Integral) and not isinstance(random_state, bool)
    ):
        from sklearn.utils import check_random_state

        return check_random_state(random_state)
    raise TypeError(
        "random_state must be None, an int, a numpy RandomState or Generator, "
        f"got {type(random_state).__name__}"
    )


def _svd_seed(random_state):
    """Seed for ``randomized_svd``, which takes None, an int or a RandomState only."""
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**31 - 1))
    return random_state


def initialize(Y, k, init, random_state=None, eps=1e-6):
    """Starting factors ``(W, H)`` of shapes (m, k), (k, d) for ``init`` (not "custom").

    Parameters
    ----------
    Y : (m, d) array or sparse matrix, Y >= 0 (checked by the caller)
    k : int
    init : None, "random", "nndsvd", "nndsvda" or "nndsvdar"
    random_state : None, int, RandomState or Generator
    eps : float
        NNDSVD entries below eps become 0 (scikit-learn's truncation).

    Returns
    -------
    W, H : ndarray, Y's floating dtype (float64 for integer Y)
    """
    import scipy.sparse as sp

    y = Y.get() if is_cupy(Y) else Y  # NumPy or scipy.sparse on the host
    m, d = y.shape
    init = resolve_init(check_init(init), k, (m, d))
    if init == "custom":
        raise ValueError("init='custom' takes W and H from the caller")
    dtype = np.float32 if y.dtype == np.float32 else np.float64
    if not sp.issparse(y):
        y = np.asarray(y, dtype=dtype)
    else:
        y = y.astype(dtype)
    mean = y.dtype.type(y.mean())  # in Y's dtype, as scikit-learn
    source = random_source(random_state)  # validates random_state
    if init == "random":
        avg = np.sqrt(mean / k)
        H = avg * source.standard_normal(size=(k, d)).astype(dtype, copy=False)
        W = avg * source.standard_normal(size=(m, k)).astype(dtype, copy=False)
        return np.abs(W).astype(dtype, copy=False), np.abs(H).astype(dtype, copy=False)
    # as scikit-learn: the SVD gets the seed itself, the nndsvdar fill a fresh stream
    W, H = _nndsvd(y, k, _svd_seed(random_state))
    source = random_source(random_state)
    W[W < eps] = 0
    H[H < eps] = 0
    if init == "nndsvda":
        W[W == 0] = mean
        H[H == 0] = mean
    elif init == "nndsvdar":
        W[W == 0] = np.abs(mean * source.standard_normal(size=int((W == 0).sum())) / 100)
        H[H == 0] = np.abs(mean * source.standard_normal(size=int((H == 0).sum())) / 100)
    return W, H


def _nndsvd(y, k, seed):
    """NNDSVD (Boutsidis and Gallopoulos 2008): per singular pair, the larger of the
    (positive, positive) and (negative, negative) parts, scaled by sqrt(s_j * its norm)."""
    from sklearn.utils.extmath import randomized_svd

    U, S, V = randomized_svd(y, k, random_state=seed)
    W = np.zeros_like(U)
    H = np.zeros_like(V)
    # the leading singular pair of a nonnegative matrix is nonnegative up to sign
    W[:, 0] = np.sqrt(S[0]) * np.abs(U[:, 0])
    H[0, :] = np.sqrt(S[0]) * np.abs(V[0, :])
    for j in range(1, k):
        x, z = U[:, j], V[j, :]
        xp, zp = np.maximum(x, 0), np.maximum(z, 0)
        xn, zn = np.abs(np.minimum(x, 0)), np.abs(np.minimum(z, 0))
        xp_n, zp_n = np.linalg.norm(xp), np.linalg.norm(zp)
        xn_n, zn_n = np.linalg.norm(xn), np.linalg.norm(zn)
        mp, mn = xp_n * zp_n, xn_n * zn_n
        if mp > mn:
            u, v, sigma = xp / xp_n, zp / zp_n, mp
        else:
            u, v, sigma = xn / xn_n, zn / zn_n, mn
        scale = np.sqrt(S[j] * sigma)
        W[:, j] = scale * u
        H[j, :] = scale * v
    return W, H
