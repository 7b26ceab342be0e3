"""A small numpy training engine on the kernels package. Knows nothing of capture or reports:
it takes an optional profiling session and hands it its epochs and op timings."""

from .data import Batches, load_npz
from .layers import Conv2D, Dense, Dropout, Flatten, MaxPool2D, ReLU, Sigmoid, Softmax
from .loop import Events, Loop, State
from .model import Sequential
from .optimizers import SGD, Adadelta, Adam, RMSprop

__all__ = ["Batches", "load_npz", "Conv2D", "Dense", "Dropout", "Flatten", "MaxPool2D", "ReLU", "Sigmoid",
           "Softmax", "Events", "Loop", "State", "Sequential", "SGD", "Adadelta", "Adam", "RMSprop"]
