"""Scalar argument checks shared by the golden and GPU stages: bad input raises a TypeError or
ValueError that names the argument, before any arithmetic or kernel launch sees it."""
import numpy as np


def int_arg(name, x, lo):
    """x as a Python int >= lo; bools and floats are refused (True is not a token count)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    if x < lo:
        raise ValueError(f"{name} must be >= {lo}, got {x}")
    return int(x)


def float_arg(name, x):
    """x as a Python float; bools and non-numbers are refused."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.number)):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    return float(x)


def sparse_arg(sparse_v):
    """The sparse-V threshold: a float in [0, 1) (0 = exact attention)."""
    sparse_v = float_arg("sparse_v", sparse_v)
    if not 0.0 <= sparse_v < 1.0:                # also rejects NaN
        raise ValueError(f"sparse_v must be in [0, 1), got {sparse_v!r}")
    return sparse_v
