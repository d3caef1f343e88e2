"""Cart-pole: ``J_hat`` of the LQR and its variants under the research prototype's models.

The fixed linear controllers of ``benchmarks/cartpole_reference_policies.py`` (the LQR at
upright and the LQR with gains removed or flipped) under the models of
``benchmarks/local_linear_model.py``: the kernel model, the local-linear successors (``full``)
and ``full`` with the reward penalty off the data. Their real returns are in that script's
output (the LQR and the LQR without its ``x`` gain balance for 10^4 steps). No fitting.

    python benchmarks/cartpole_prototype_references.py cartpole-random:1 cartpole-random:4
"""

from __future__ import annotations

import argparse
import warnings

import torch
from cartpole_reference_policies import LinearPolicy, lqr_gain, variants
from local_linear_model import TwoHopModel

MODELS = (("kernel", False), ("full", False), ("full", True))


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_default_dtype(torch.float64)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="cartpole-random:SEED")
    args = parser.parse_args()
    policies = {name: LinearPolicy(gain) for name, gain in variants(lqr_gain()).items()}
    for spec in args.specs:
        for mode, penalty in MODELS:
            model = TwoHopModel(spec, mode, {}, penalty=penalty)
            with torch.no_grad():
                values = {name: round(float(model.J(p)), 1) for name, p in policies.items()}
            print(spec, mode, "with penalty" if penalty else "", values, flush=True)


if __name__ == "__main__":
    main()
