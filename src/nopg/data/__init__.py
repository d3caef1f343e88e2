"""Transition data: the dataset, its file formats (npz, D4RL HDF5, Minari) and the state dimensions
that carry no information.
"""

from .dataset import TransitionDataset
from .formats import load_dataset, save_dataset

__all__ = ["TransitionDataset", "load_dataset", "save_dataset"]
