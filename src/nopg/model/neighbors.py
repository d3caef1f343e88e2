"""Exact k-nearest-neighbour search behind one interface.

NOPG's sparse transition matrix keeps, for every query, the ``k`` data points with the largest
log-weights. With Gaussian kernels the log-weight is minus half a squared Euclidean distance in
bandwidth-scaled coordinates, so "largest log-weights" is "nearest neighbours". Two back ends:

- ``"kdtree"``: :class:`scipy.spatial.cKDTree` on the CPU. Measured on the 2-core machine it
  answered 200 000 queries against 200 000 four-dimensional points (k = 32) in 2.4 s, ahead of
  scikit-learn (4.4 s), FAISS-HNSW (10 s), KeOps (36 s) and tiled torch top-k (124 s)
  (``shared/ECOSYSTEM.md``). It is the default for CPU data of up to 20 dimensions.
- ``"torch"``: tiled brute force (``||q||^2 - 2 q.p + ||p||^2`` per block, then ``topk``) on the
  points' device. Quadratic work, but it runs on a GPU, where it is the default for points of
  more than 8 dimensions. Below that the KD-tree on the CPU wins even against a GPU: at 10^6
  four-dimensional points it answered the candidate query (k = 41) 2× faster with one worker than
  the tiled search on an H200 (``benchmarks/bench_knn_tiles.py``), so GPU points of up to 8
  dimensions are searched by the KD-tree and the answers copied to the GPU.

:meth:`NeighborIndex.query` returns neighbours sorted by increasing distance, with distances
recomputed exactly from the coordinates (the expanded formula only ranks), in blocks of
``block_elements`` so that 10^6 queries of 41 neighbours stay within a few hundred MB;
:meth:`NeighborIndex.query_index` returns the indices alone (in the back end's order), for
callers that recompute what they need from the coordinates.

The KD-tree answers large batches of queries in Z-order (:func:`z_order`) and puts the results
back in the caller's order: consecutive queries then walk the same branches of the tree, which
stay in cache, instead of jumping across the data at every query. The answers are the same.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree

from ..validation import check_positive_int
from .kernels import gathered_squared_distances

BACKENDS = ("auto", "kdtree", "torch")
_KDTREE_MAX_DIM = 20
# GPU points of up to this dimension are searched by the CPU KD-tree too (module docstring).
_KDTREE_MAX_DIM_GPU = 8
_Z_ORDER_MIN_QUERIES = 4096     # smaller batches fit in cache without sorting
# Tiled brute force: queries x points held at once, by the points' device (NeighborIndex).
DEFAULT_BLOCK_ELEMENTS = {"cpu": 1 << 24, "gpu": 1 << 27}


def z_order(points: np.ndarray, bits: int = 10, isotropic: bool = False) -> np.ndarray:
    """The permutation that visits ``points`` (m, d) along a Z-order (Morton) curve.

    Each coordinate is cut into ``2^b`` cells (``b = min(bits, 62 // d)``) and the cell indices'
    bits are interleaved into one integer key, which is sorted (stable, so equal keys keep their
    order). The cells divide the points' bounding box per axis, or with ``isotropic=True`` the
    smallest cube that holds them, so that a cell has the same width along every axis: for
    points already scaled to a common metric (bandwidth units) consecutive points are then
    close in that metric, however unequal the axes' extents.
    """
    m, d = points.shape
    b = max(1, min(int(bits), 62 // max(d, 1)))
    lo = points.min(axis=0)
    span = points.max(axis=0) - lo
    if isotropic:
        span = np.full_like(span, span.max(initial=0.0))
    span[span <= 0] = 1.0
    cells = np.clip(((points - lo) / span * (1 << b)).astype(np.int64), 0, (1 << b) - 1)
    key = np.zeros(m, dtype=np.int64)
    for bit in range(b - 1, -1, -1):
        for j in range(d):
            key = (key << 1) | ((cells[:, j] >> bit) & 1)
    return np.argsort(key, kind="stable")


def z_order_groups(points: np.ndarray, size: int, isotropic: bool = True) -> np.ndarray:
    """Groups of ``size`` consecutive points along the Z-order curve (the last may be smaller):
    ``groups[i]`` is point ``i``'s group, from 0 to ``ceil(m / size) - 1``. Points of one group
    lie close together (aggregates of :func:`nopg.linalg.solvers.aggregation_preconditioner`); with
    ``isotropic`` (the default) close in the points' own metric (:func:`z_order`)."""
    check_positive_int("size", size)
    groups = np.empty(points.shape[0], dtype=np.int64)
    groups[z_order(points, isotropic=isotropic)] = np.arange(points.shape[0]) // int(size)
    return groups


class NeighborIndex:
    """k-NN search over a fixed set of points.

    Parameters
    ----------
    points : tensor of shape (n, d)
        The data points (already divided by their bandwidths). Results live on their device.
    backend : {"auto", "kdtree", "torch"}
        ``auto``: the KD-tree for points of dimension <= 20 on the CPU and <= 8 elsewhere
        (searched on the CPU, answers copied to the points' device), tiled brute force otherwise.
    block_elements : int, optional
        Tiled brute force: the largest ``queries x points`` block held at once. Default
        ``2**24`` for CPU points and ``2**27`` for GPU points (:data:`DEFAULT_BLOCK_ELEMENTS`):
        a GPU needs tiles of hundreds of rows to be busy, and at 10^6 points ``2**24`` gave tiles of
        16 rows, whose 62 500 ``topk`` launches took 22 s per full query on an H200.

    Examples
    --------
    >>> import torch
    >>> index = NeighborIndex(torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64))
    >>> sqdist, idx = index.query(torch.tensor([[0.9]], dtype=torch.float64), k=2)
    >>> idx.tolist()
    [[1, 0]]
    """

    def __init__(self, points: torch.Tensor, backend: str = "auto",
                 block_elements: int | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"The 'backend' parameter must be one of {BACKENDS}. Got {backend!r} instead.")
        if points.ndim != 2 or points.shape[0] == 0:
            raise ValueError(f"points must have shape (n, d) with n >= 1. Got {tuple(points.shape)} instead.")
        on_cpu = points.device.type == "cpu"
        if backend == "auto":
            limit = _KDTREE_MAX_DIM if on_cpu else _KDTREE_MAX_DIM_GPU
            backend = "kdtree" if points.shape[1] <= limit else "torch"
        self.points = points
        self.backend = backend
        if block_elements is None:
            block_elements = DEFAULT_BLOCK_ELEMENTS["cpu" if on_cpu else "gpu"]
        check_positive_int("block_elements", block_elements)
        self.block_elements = int(block_elements)
        self._tree: cKDTree | None = None
        self._sq_norms: torch.Tensor | None = None
        self._point_columns: torch.Tensor | None = None

    @property
    def n(self) -> int:
        return self.points.shape[0]

    def _check_query(self, queries: torch.Tensor, k: int) -> None:
        if not 1 <= k <= self.n:
            raise ValueError(f"k must be between 1 and the number of points ({self.n}). Got {k} instead.")
        if queries.ndim != 2 or queries.shape[1] != self.points.shape[1]:
            raise ValueError(f"queries must have shape (m, {self.points.shape[1]}). "
                             f"Got {tuple(queries.shape)} instead.")

    def query(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest points of every query.

        Parameters
        ----------
        queries : tensor of shape (m, d)
        k : int, 1 <= k <= n

        Returns
        -------
        sqdist : tensor of shape (m, k)
            Squared Euclidean distances, increasing along each row.
        index : long tensor of shape (m, k)
        """
        self._check_query(queries, k)
        if queries.shape[0] == 0:
            empty = torch.empty(0, k, dtype=self.points.dtype, device=self.points.device)
            return empty, empty.long()
        with torch.no_grad():
            q = queries.detach().to(self.points.dtype)
            index = self.query_index(q, k)
            sqdist = torch.empty(index.shape, dtype=self.points.dtype, device=self.points.device)
            block = max(1, self.block_elements // (k * self.points.shape[1]))
            for s0 in range(0, q.shape[0], block):
                d2 = gathered_squared_distances(q[s0:s0 + block], self._columns(),
                                                index[s0:s0 + block])             # (b, k)
                order = torch.argsort(d2, dim=1, stable=True)
                sqdist[s0:s0 + block] = d2.gather(1, order)
                index[s0:s0 + block] = index[s0:s0 + block].gather(1, order)
            return sqdist, index

    def _columns(self) -> torch.Tensor:
        """The points' coordinates as contiguous columns (d, n), made at the first query."""
        if self._point_columns is None:
            self._point_columns = self.points.T.contiguous()
        return self._point_columns

    def query_index(self, queries: torch.Tensor, k: int) -> torch.Tensor:
        """The indices (m, k) of the ``k`` nearest points of every query, in the back end's order
        (increasing distance as the back end computed it), without the exact recomputation."""
        self._check_query(queries, k)
        if queries.shape[0] == 0:
            return torch.empty(0, k, dtype=torch.long, device=self.points.device)
        with torch.no_grad():
            q = queries.detach().to(self.points.dtype)
            return self._query_kdtree(q, k) if self.backend == "kdtree" else self._query_torch(q, k)

    def _query_kdtree(self, q: torch.Tensor, k: int) -> torch.Tensor:
        if self._tree is None:
            self._tree = cKDTree(self.points.cpu().numpy())
        qn = q.cpu().numpy()
        # Large batches are answered in Z-order and put back (module docstring).
        order = (z_order(qn) if qn.shape[0] >= _Z_ORDER_MIN_QUERIES and np.isfinite(qn).all()
                 else None)
        _, found = self._tree.query(qn if order is None else qn[order], k=k,
                                    workers=max(1, torch.get_num_threads()))
        idx = np.asarray(found, dtype=np.int64).reshape(qn.shape[0], k)
        if order is not None:
            idx[order] = idx.copy()
        return torch.from_numpy(idx).to(self.points.device)

    def _query_torch(self, q: torch.Tensor, k: int) -> torch.Tensor:
        if self._sq_norms is None:
            self._sq_norms = (self.points * self.points).sum(-1)
        block = max(1, self.block_elements // self.n)
        out = []
        for start in range(0, q.shape[0], block):
            qb = q[start:start + block]
            d2 = (qb * qb).sum(-1, keepdim=True) - 2.0 * qb @ self.points.T + self._sq_norms
            out.append(torch.topk(d2, k, dim=1, largest=False).indices)
        return torch.cat(out)
