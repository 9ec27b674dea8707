"""Argument checks shared by the golden and GPU stages.

Bad input raises before any arithmetic, state change or kernel launch sees it: a TypeError for
a wrong type or dtype, a ValueError for a wrong shape, range or value. Every message starts with
the argument's name as the caller spelled it ("x must be finite: ...").
"""

import weakref

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


def finite_float_arg(name, x, lo=None, strict=False):
    """x as a finite Python float, >= lo (> lo when strict) if lo is given."""
    v = float_arg(name, x)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if lo is not None and (v <= lo if strict else v < lo):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {lo}, got {v!r}")
    return v


def bool_arg(name, x):
    """x as a Python bool; 0, 1, strings and None are refused (a truthy string is no flag)."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(x).__name__}")
    return bool(x)


def bits_arg(bits, top=8, used="8, 4, 3, 2"):
    """bits of a quantizer as a Python int in 1..top: turbo's 1..8 (the cache uses 8, 4, 3 and
    2), tq's 1..4 (top=4, used="4, 3, 2"). Any bad value, a bool or a float included, is a
    ValueError."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= top:
        raise ValueError(f"bits must be an int in 1..{top} (the cache uses {used}), got {bits!r}")
    return int(bits)


def rotary_dim_arg(rotary_dim):
    """The rotary width as a Python int, even and >= 0 (check_rotary_fits bounds it above once
    the rotated vectors' width is known)."""
    rotary_dim = int_arg("rotary_dim", rotary_dim, 0)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even, got {rotary_dim}")
    return rotary_dim


def check_rotary_fits(rotary_dim, width):
    """rotary_dim <= width, the head width of the vectors it rotates."""
    if rotary_dim > width:
        raise ValueError(f"rotary_dim must be <= {width} (the head width), got {rotary_dim}")


def rope_scalars(rotary_dim, theta, eps):
    """(rotary_dim, theta, eps) of a norm-then-RoPE stage, checked before any array:
    rotary_dim_arg, theta a finite float > 0, eps a finite float >= 0."""
    rotary_dim = rotary_dim_arg(rotary_dim)
    theta = finite_float_arg("theta", theta, 0.0, strict=True)
    return rotary_dim, theta, finite_float_arg("eps", eps, 0.0)


def sparse_arg(sparse_v):
    """The sparse-V threshold: a float in [0, 1) (0 = exact attention)."""
    sparse_v = float_arg("sparse_v", sparse_v)
    if not 0.0 <= sparse_v < 1.0:  # also rejects NaN
        raise ValueError(f"sparse_v must be in [0, 1), got {sparse_v!r}")
    return sparse_v


_F32_MAX = float(np.finfo(np.float32).max)


def check_finite(name, a):
    """a unchanged; ValueError naming it when it holds NaN or +-inf, or, in a dtype wider than
    float32, a value beyond float32's range (the stages' results are float32: such a value
    could only come out as inf, or as NaN where two of them cancel in float64)."""
    if not np.isfinite(a).all():
        bad = int(np.count_nonzero(~np.isfinite(a)))
        raise ValueError(f"{name} must be finite: {bad} of {a.size} values are NaN or +-inf")
    if (
        a.dtype.itemsize > 4
        and np.issubdtype(a.dtype, np.floating)
        and a.size
        and np.abs(a).max() > _F32_MAX
    ):
        raise ValueError(
            f"{name} must be finite in float32: it holds values beyond +-{_F32_MAX:.4g}"
        )
    return a


def check_scales(name, d, limit):
    """d: float16 scales a quantizer computed from the argument `name`. An overflowed (inf)
    scale would dequantize to inf or NaN, so the group is refused, naming the argument and the
    largest max |value| a group may have (limit: layout.Q8_LIMIT or layout.turbo_limit)."""
    if not np.isfinite(d).all():
        raise ValueError(
            f"{name}: a group's max |{name}| needs a scale beyond float16's range "
            f"(this format stores max |{name}| below {limit:.4g})"
        )


def typed_array(name, a, dtype):
    """a as a numpy array of exactly this dtype (stored codes and scales): TypeError otherwise."""
    a = np.asarray(a)
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
    return a


def real_array(name, x, ints=True, ndim=None):
    """x as a numpy array of a real floating dtype (or an integer dtype when ints).

    Bool, complex, object and string arrays are a TypeError naming the argument; ndim, when
    given, must match exactly (ValueError)."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:  # ragged nested lists and the like
        raise TypeError(f"{name} must be an array: {e}") from None
    if not (np.issubdtype(a.dtype, np.floating) or (ints and np.issubdtype(a.dtype, np.integer))):
        kind = "real numeric" if ints else "floating-point"
        raise TypeError(f"{name} must be a {kind} array, got dtype {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {a.shape}")
    return a


def f32_array(name, x, ints=True, ndim=None):
    """real_array(...) as float32, every value finite.

    The check runs on the float32 values the stage computes with, so a float64 value beyond
    float32's range (which the cast turns into inf) is refused like an inf."""
    a = real_array(name, x, ints, ndim)
    with np.errstate(over="ignore"):
        f = a.astype(np.float32, copy=False)
    if not np.isfinite(f).all():
        check_finite(name, a)  # NaN / inf, or beyond float32
        raise ValueError(f"{name} must be finite in float32")  # any other way to inf
    return f


# Weight arrays a golden FullAttentionLayer checked (finite float32) when it was built, by id.
# The stage functions it calls on them every step (linear, mlp, indexer_project) skip their
# finiteness scan: it would read every weight once more per step, about doubling a decode
# step's time. Weak references, so a weight that dies leaves no entry behind.
_checked_weights = weakref.WeakValueDictionary()


def mark_checked(a):
    """Record the array a as a checked weight (a has been through f32_array and is owned,
    read-only, by a layer)."""
    _checked_weights[id(a)] = a


def weight_array(name, w, ndim=2):
    """f32_array(name, w, ndim=ndim), or w itself when a layer checked it when it was built."""
    if _checked_weights.get(id(w)) is w:
        return w
    return f32_array(name, w, ints=True, ndim=ndim)
