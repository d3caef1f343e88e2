"""k-NN back ends at Hopper size: build and query times, recall, one thread, one run.

    python benchmarks/bench_knn_backends.py --n 100000 --k 10 [--data hopper|gaussian] \
        [--queries 20000] [--out records/bench_knn_backends.csv]

The points are what NOPG searches: (state, action) pairs divided by their ``auto`` bandwidths
(:func:`nopg.select_bandwidths`). ``hopper`` collects ``--n`` Hopper-v5 transitions with uniform
random actions (11-D state, 3-D action: 14-D points); ``gaussian`` draws 14-D standard normal
points. The queries are ``--queries`` next states with the data's own actions perturbed by one
bandwidth (as a policy's actions are), scaled the same way. Every back end answers the same
queries; the exact ones must agree with scipy's KD-tree (distances to 1e-9), the approximate
ones report recall@k against it. Back ends that are not installed are skipped (faiss-cpu,
pynndescent and scikit-learn are not dependencies of nopg). Times are wall-clock seconds of one
process with one thread, reported with their ratio to the KD-tree's query time measured in the
same run.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _harness import add_out_arg, timed, write_csv  # noqa: E402


def hopper_points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled (state, action) pairs and scaled perturbed queries from Hopper-v5 random data."""
    from nopg import select_bandwidths
    from nopg.envs.hopper import collect_hopper

    data = collect_hopper(n, seed=seed)
    bw = select_bandwidths(data)
    points = np.hstack([data.states / bw.state, data.actions / bw.action])
    rng = np.random.default_rng(seed + 1)
    acts = data.actions / bw.action + rng.normal(size=data.actions.shape)
    queries = np.hstack([data.next_states / bw.state, acts])
    return points, queries


def gaussian_points(n: int, seed: int, dim: int = 14) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, dim)), rng.normal(size=(n, dim))


def _kdtree(points: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
    from scipy.spatial import cKDTree

    tree = cKDTree(points)
    return lambda q, k: tree.query(q, k=k)[1]


def _sklearn(algorithm: str) -> Callable[[np.ndarray], Callable[[np.ndarray, int], np.ndarray]]:
    def build(points: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
        from sklearn.neighbors import NearestNeighbors

        nn_ = NearestNeighbors(algorithm=algorithm, n_jobs=1).fit(points)
        return lambda q, k: nn_.kneighbors(q, n_neighbors=k, return_distance=False)
    return build


def _torch(points: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
    from nopg.model.neighbors import NeighborIndex

    index = NeighborIndex(torch.as_tensor(points), backend="torch")
    return lambda q, k: index.query(torch.as_tensor(q), k)[1].numpy()


def _faiss(kind: str) -> Callable[[np.ndarray], Callable[[np.ndarray, int], np.ndarray]]:
    def build(points: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
        import faiss

        faiss.omp_set_num_threads(1)
        x = np.ascontiguousarray(points, dtype=np.float32)
        if kind == "flat":
            index = faiss.IndexFlatL2(x.shape[1])
        else:
            index = faiss.IndexHNSWFlat(x.shape[1], 32)
            index.hnsw.efSearch = 128
        index.add(x)
        return lambda q, k: index.search(np.ascontiguousarray(q, dtype=np.float32), k)[1]
    return build


def _pynndescent(points: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
    import pynndescent

    index = pynndescent.NNDescent(points, n_neighbors=30, random_state=0, n_jobs=1)
    index.prepare()
    return lambda q, k: index.query(q, k=k)[0]


BACKENDS: dict[str, tuple[Callable, bool]] = {       # name: (builder, exact)
    "scipy-kdtree": (_kdtree, True),
    "sklearn-kd_tree": (_sklearn("kd_tree"), True),
    "sklearn-ball_tree": (_sklearn("ball_tree"), True),
    "sklearn-brute": (_sklearn("brute"), True),
    "torch-tiled": (_torch, True),
    "faiss-flat": (_faiss("flat"), True),
    "faiss-hnsw": (_faiss("hnsw"), False),
    "pynndescent": (_pynndescent, False),
}


def run(points: np.ndarray, queries: np.ndarray, k: int, names: list[str]) -> list[dict]:
    """One row per back end: build and query seconds, recall@k against the KD-tree."""
    torch.set_num_threads(1)
    rows, reference, base = [], None, None
    for name in names:
        builder, exact = BACKENDS[name]
        try:
            search, build_watch = timed(builder, points)
            idx, query_watch = timed(lambda: np.asarray(search(queries, k)))  # noqa: B023
            built, queried = build_watch.wall_s, query_watch.wall_s
        except ImportError as err:
            print(f"{name}: skipped ({err})")
            continue
        if reference is None:
            reference, base = idx, queried
        hits = np.mean([len(set(a) & set(b)) / k for a, b in zip(idx, reference)])
        row = {"backend": name, "exact": exact, "n": points.shape[0], "dim": points.shape[1],
               "queries": queries.shape[0], "k": k, "build_s": round(built, 3),
               "query_s": round(queried, 3), "query_ratio_to_kdtree": round(queried / base, 3),
               "recall": round(float(hits), 5)}
        print(row)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--data", choices=("hopper", "gaussian"), default="hopper")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--seed", type=int, default=0)
    add_out_arg(parser, help="write the rows (CSV) to this file")
    args = parser.parse_args()
    if args.backends[0] != "scipy-kdtree":
        args.backends = ["scipy-kdtree"] + [b for b in args.backends if b != "scipy-kdtree"]
    points, queries = (hopper_points if args.data == "hopper" else gaussian_points)(args.n, args.seed)
    queries = queries[: args.queries]
    rows = run(points, queries, args.k, args.backends)
    if args.out is not None and rows:
        write_csv(args.out, rows)


if __name__ == "__main__":
    main()
