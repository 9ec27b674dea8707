"""The tq-b KV format (qwenref/golden/tq.py, the cache kinds tq4, tq3, tq2): its codebook against
the published Lloyd–Max quantizer, the sign pattern, the packing written out by hand, the
quantizer's rules (nearest code, ties, zero vectors, the least-squares scale), bad input, its
error on vectors with outlier channels against turbo-n's, and the golden layer on a tq cache.
CPU only."""

import copy
import math

import numpy as np
import pytest

import qwenref
from qwenref import golden, layout

F32, F64 = np.float32, np.float64

# Max (1960), "Quantizing for minimum distortion", table I / Lloyd (1982): the positive levels
# of the Lloyd–Max quantizer of the standard normal with 2, 4, 8, 16 levels, and its mean
# squared error, as published (4 digits)
PUBLISHED_LEVELS = {
    1: [0.7979],
    2: [0.4528, 1.5104],
    3: [0.2451, 0.7560, 1.3440, 2.1520],
    4: [0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326],
}
PUBLISHED_MSE = {1: 0.3634, 2: 0.1175, 3: 0.03454, 4: 0.009497}


# ---- helpers written from the spec, sharing no code with qwenref.golden.tq --------------------
def unpack_by_hand(packed, bits):
    """Code i = bits [bits·i, bits·i + bits) of the vector's bytes read as one little-endian
    integer."""
    v = int.from_bytes(bytes(np.asarray(packed, np.uint8)), "little")
    return [(v >> (bits * i)) & ((1 << bits) - 1) for i in range(len(packed) * 8 // bits)]


def spec_u(y):
    """u = y · sqrt(n) / ‖y‖, the norm from float64 squares, rounded to float32 once."""
    y64 = np.asarray(y, F64)
    return (y64 * (math.sqrt(y64.shape[-1]) / np.sqrt(np.sum(y64 * y64)))).astype(F32)


def fmix32(h):
    """MurmurHash3's 32-bit finalizer, on Python ints."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def gauss_legendre(f, a, b, order=80):
    """∫_a^b f by Gauss–Legendre quadrature (exact to ~1e-14 here: smooth f, short cells)."""
    x, w = np.polynomial.legendre.leggauss(order)
    x = (b - a) / 2 * x + (a + b) / 2
    return (b - a) / 2 * np.sum(w * f(x))


def normal_pdf(x):
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


# ---- the codebook -----------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_codebook_is_the_published_lloyd_max_quantizer(bits):
    cb = golden.tq_codebook(bits)
    assert cb.dtype == F32 and cb.shape == (1 << bits,)
    assert np.all(np.diff(cb) > 0) and np.array_equal(cb, -cb[::-1])  # ascending, symmetric
    # Max's tables carry an error of one unit in the 4th decimal in places (b = 3: 1.3440 for
    # 1.343909..., b = 4: 0.3881 for 0.388048...): agree to that unit
    assert np.max(np.abs(cb[1 << (bits - 1) :] - PUBLISHED_LEVELS[bits])) <= 1e-4
    # converged: every level is the mean of the normal over its cell (boundaries at the
    # midpoints), by quadrature; 1e-6 allows the float32 rounding of the levels (< 2.4e-7),
    # which moves the boundaries and so the means by as much
    c = cb.astype(F64)
    t = np.concatenate([[-13.0], (c[:-1] + c[1:]) / 2, [13.0]])  # P(|Z| > 13) ~ 1e-38
    mse = 0.0
    for j, level in enumerate(c):
        mass = gauss_legendre(normal_pdf, t[j], t[j + 1])
        mean = gauss_legendre(lambda x: x * normal_pdf(x), t[j], t[j + 1]) / mass
        assert abs(mean - level) <= 1e-6, (j, mean, level)
        mse += gauss_legendre(lambda x, m=level: (x - m) ** 2 * normal_pdf(x), t[j], t[j + 1])
    assert mse == pytest.approx(PUBLISHED_MSE[bits], rel=1e-3)  # 4 published digits, as above


def test_codebook_is_pinned_in_float32():
    # the stored codes mean these float32 values: a change in the iteration or its stopping
    # rule that moved one would make existing caches decode differently
    assert golden.tq_codebook(2).tolist() == [
        -1.5104175806045532,
        -0.4527800381183624,
        0.4527800381183624,
        1.5104175806045532,
    ]
    assert golden.tq_codebook(4)[8:].tolist()[:2] == [0.12839503586292267, 0.38804829120635986]
    a = golden.tq_codebook(3)
    a[:] = 0  # a new array each call: the cached table is untouched
    assert golden.tq_codebook(3)[0] < 0


# ---- the sign pattern -------------------------------------------------------------------------
def test_sign_pattern_is_pinned():
    s = layout.tq_signs(16)
    assert s.dtype == F32
    assert s.astype(int).tolist() == [1, -1, 1, -1, -1, -1, 1, 1, -1, -1, 1, 1, -1, 1, -1, -1]
    # the rule, from the hash written out: s_i = +1 iff fmix32(i) is even
    assert [fmix32(i) for i in range(1, 4)] == [0x514E28B7, 0x30F4C306, 0x85F0B427]
    n = 1024
    want = [1.0 if fmix32(i) % 2 == 0 else -1.0 for i in range(n)]
    assert layout.tq_signs(n).tolist() == want
    assert np.array_equal(layout.tq_signs(64), layout.tq_signs(256)[:64])  # one sequence
    assert int(layout.tq_signs(256).sum()) == 2  # 129 of +1, 127 of -1
    # and it does what it is for: a constant vector, which the plain WHT maps to one spike,
    # is spread over the row (max |y| 2.9 of rms 1 at 256, against 16 unsigned)
    assert np.abs(golden.wht(layout.tq_signs(256))).max() < 3
    for bad, exc in ((0, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(exc, match="^head_dim"):
            layout.tq_signs(bad)


def test_signed_wht_is_the_rotation_and_its_inverse(rng):
    x = rng.standard_normal((3, 64)).astype(F32)
    s = layout.tq_signs(64)
    y = golden.wht_signed(x, s)
    assert np.array_equal(y, golden.wht(x * s))
    back = golden.wht_signed(y, s, inverse=True)
    assert np.abs(back - x).max() <= 4 * 2.0**-23 * np.abs(x).max()  # two float32 roundings
    # with all +1 it is bit for bit the plain WHT (turbo's rotation), both ways
    ones = np.ones(64, F32)
    assert np.array_equal(golden.wht_signed(x, ones), golden.wht(x))
    assert np.array_equal(golden.wht_signed(x, ones, inverse=True), golden.wht(x))
    for signs in (np.ones(32, F32), np.full(64, 0.5, F32)):
        with pytest.raises(ValueError, match="^signs"):
            golden.wht_signed(x, signs)
    with pytest.raises(TypeError, match="^inverse"):
        golden.wht_signed(x, s, inverse=1)


# ---- packing and the quantizer's rules --------------------------------------------------------
@pytest.mark.parametrize(
    "bits, codes, packed, pad",
    [
        # 3 bits: Σ c_i << 3i over c = 0..7 is 0xFAC688, little-endian bytes 88 C6 FA
        (3, list(range(8)), [0x88, 0xC6, 0xFA], [3, 4] * 4),
        (4, [1, 2, 15, 0], [0x21, 0x0F], [7, 8] * 9),  # low nibble first
        (2, [3, 0, 1, 2, 0, 0, 0, 3], [0x93, 0xC0], [1, 2] * 4),  # 3 | 1 << 4 | 2 << 6; 3 << 6
    ],
)
def test_packing_by_hand(bits, codes, packed, pad):
    cb = golden.tq_codebook(bits)
    # decoding: the bytes written out hold the codes
    out = golden.tq_dequantize(np.array(packed, np.uint8), np.float16(1), bits)
    assert np.array_equal(out, cb[codes])
    # encoding: a vector of codebook levels times 0.5 codes as those levels when its rms is
    # near 0.5 (u = the vector at unit rms): the pattern, then inner levels as padding that
    # bring the rms there; checked below as the construction's premise
    y = cb[codes + pad] * F32(0.5)
    near = np.argmin(np.abs(spec_u(y)[:, None] - cb[None]), axis=1)
    assert near.tolist() == codes + pad  # the premise
    got, gamma = golden.tq_quantize(y, bits)
    assert got.dtype == np.uint8 and got.shape == (len(y) * bits // 8,)
    assert got[: len(packed)].tolist() == packed
    assert unpack_by_hand(got, bits) == codes + pad
    assert gamma.dtype == np.float16 and gamma == 0.5  # ⟨y, C⟩ / ⟨C, C⟩ = 0.5 exactly
    assert np.array_equal(golden.tq_dequantize(got, gamma, bits), y)  # C · 0.5: exact


def _vector_with_u(m, n=8):
    """y (float32 [n]) whose u_0 is exactly m: y_0 = m, six fillers f and one g with
    m² + 6f² + g² as close to n as float32 allows (searched), so sqrt(n)/‖y‖ is 1 to well
    within the half ulp that float32 rounding of m · (sqrt(n)/‖y‖) forgives."""
    up = down = F32(math.sqrt((n - m * m) / (n - 1)))
    fillers = [up]
    for _ in range(40):  # 40 float32 steps either way
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(0))
        fillers += [up, down]
    best = None
    for f in fillers:
        g = F32(math.sqrt(n - m * m - 6 * float(f) ** 2))
        y = np.array([m] + [f] * 6 + [g], F32)
        miss = abs(float(np.sum(y.astype(F64) ** 2)) - n)
        if best is None or miss < best[0]:
            best = (miss, y)
    y = best[1]
    assert spec_u(y)[0] == m  # the construction's premise
    return y


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_codes_are_the_nearest_level_ties_to_the_lower_index(rng, bits):
    cb = golden.tq_codebook(bits)
    half = 1 << (bits - 1)
    # the exact tie at 0, between -C_min and +C_min, in every codebook: the lower index
    y = np.array([0, 1, -1, 2, 0, -3, 0.5, 0], F32)
    codes = unpack_by_hand(golden.tq_quantize(y, bits)[0], bits)
    assert [codes[i] for i in (0, 4, 7)] == [half - 1] * 3
    # every other midpoint that float32 holds exactly (3 and 4 bits have some): u on it codes
    # the lower level, the next float32 above it the upper one
    c64 = cb.astype(F64)
    for j, m in enumerate((c64[:-1] + c64[1:]) / 2):
        if F32(m) != m or m == 0:
            continue
        for u0, want in ((F32(m), j), (np.nextafter(F32(m), F32(np.inf)), j + 1)):
            got = unpack_by_hand(golden.tq_quantize(_vector_with_u(u0), bits)[0], bits)[0]
            assert got == want, (bits, m, u0)
    # and on random vectors: argmin |u - C| (np.argmin takes the first, the lower, on a tie)
    y = rng.standard_normal((64, 32)).astype(F32) * rng.uniform(0.1, 10, (64, 1)).astype(F32)
    packed, _ = golden.tq_quantize(y, bits)
    for row, p in zip(y, packed):
        want = np.argmin(np.abs(spec_u(row)[:, None].astype(F64) - c64[None]), axis=1)
        assert unpack_by_hand(p, bits) == want.tolist()


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_zero_vector_codes_the_middle_with_scale_zero(rng, bits):
    y = rng.standard_normal((3, 16)).astype(F32)
    y[1] = 0
    packed, gamma = golden.tq_quantize(y, bits)
    assert gamma[1] == 0 and unpack_by_hand(packed[1], bits) == [1 << (bits - 1)] * 16
    assert gamma[0] > 0 and gamma[2] > 0  # the other rows are coded as if alone
    alone = golden.tq_quantize(y[2], bits)
    assert np.array_equal(alone[0], packed[2]) and alone[1] == gamma[2]
    out = golden.tq_dequantize(packed, gamma, bits)
    assert out.dtype == F32 and out.shape == y.shape and not out[1].any()


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_gamma_is_the_least_squares_scale(rng, bits):
    cb = golden.tq_codebook(bits).astype(F64)
    y = (rng.standard_normal((50, 64)) * rng.uniform(0.01, 100, (50, 1))).astype(F32)
    packed, gamma = golden.tq_quantize(y, bits)
    for row, p, g in zip(y.astype(F64), packed, gamma):
        c = cb[unpack_by_hand(p, bits)]

        def err(scale, row=row, c=c):
            return float(np.sum((row - scale * c) ** 2))

        best = float(np.dot(row, c) / np.dot(c, c))  # the projection, by numpy
        assert g == np.float16(best)  # rounded once to float16
        # γ is the minimum: any perturbation, and either float16 neighbour, does worse
        for other in (best * 1.01, best * 0.99, *(np.nextafter(g, d) for d in (-np.inf, np.inf))):
            assert err(float(g)) < err(float(other)) or float(g) == float(other)
    # scaling y by a power of two scales γ and leaves the codes (every step exact)
    p4, g4 = golden.tq_quantize(y * F32(4), bits)
    assert np.array_equal(p4, packed) and np.array_equal(g4, gamma * np.float16(4))
    # negating y mirrors every code (no u is 0 here) and keeps γ
    pn, gn = golden.tq_quantize(-y, bits)
    top = (1 << bits) - 1
    assert all(
        unpack_by_hand(a, bits) == [top - c for c in unpack_by_hand(b, bits)]
        for a, b in zip(pn, packed)
    )
    assert np.array_equal(gn, gamma)


def test_round_trip_shapes_and_storage(rng):
    y = rng.standard_normal((2, 3, 256)).astype(F32)
    for bits in (4, 3, 2):
        packed, gamma = golden.tq_quantize(y, bits)
        assert packed.shape == (2, 3, 256 * bits // 8) and gamma.shape == (2, 3)
        out = golden.tq_dequantize(packed, gamma, bits)
        assert out.shape == y.shape and out.dtype == F32
        # ŷ = C[c] · float32(γ), one float32 product
        c = np.array([[unpack_by_hand(p, bits) for p in row] for row in packed])
        want = golden.tq_codebook(bits)[c] * gamma.astype(F32)[..., None]
        assert np.array_equal(out, want)
    # the stated cost: b + 16/n bits a value; tq4 at 256 130 B, turbo4 160 B, q8 272 B
    assert [layout.side_bytes_per_head(s, 256) for s in ("tq4", "turbo4", "q8")] == [130, 160, 272]
    # a 1-d vector is one vector: a 0-d gamma
    packed, gamma = golden.tq_quantize(y[0, 0], 4)
    assert packed.shape == (128,) and gamma.shape == ()
    assert np.array_equal(
        golden.tq_dequantize(packed, gamma, 4),
        golden.tq_dequantize(*golden.tq_quantize(y[:1, :1], 4), 4)[0, 0],
    )


# ---- bad input --------------------------------------------------------------------------------
def test_bad_input_is_refused_by_name_before_anything_changes(rng):
    y = rng.standard_normal((2, 64)).astype(F32)
    codes, gamma = golden.tq_quantize(y, 3)
    calls = {
        "quantize": lambda **kw: golden.tq_quantize(**{"y": y, "bits": 3, **kw}),
        "dequantize": lambda **kw: golden.tq_dequantize(
            **{"codes": codes, "gamma": gamma, "bits": 3, **kw}
        ),
        "codebook": lambda **kw: golden.tq_codebook(**{"bits": 3, **kw}),
    }
    nan_y, inf_gamma = y.copy(), gamma.copy()
    nan_y[1, 7] = np.nan
    inf_gamma[0] = np.inf
    bad = [(name, ValueError, "bits", {"bits": b}) for name in calls for b in (0, 5, True, 4.0)]
    bad += [
        ("quantize", TypeError, "y", {"y": y.astype(np.int32)}),
        ("quantize", TypeError, "y", {"y": y.astype(np.complex64)}),
        ("quantize", ValueError, "y", {"y": nan_y}),
        ("quantize", ValueError, "y", {"y": np.full((2, 64), 1e39)}),  # inf in float32
        ("quantize", ValueError, "y", {"y": np.float32(1.0)}),  # no last axis
        ("quantize", ValueError, "y", {"y": np.zeros((2, 0), F32)}),
        ("quantize", ValueError, "y", {"y": y[:, :12]}),  # 12 · 3 bits: not whole bytes
        ("quantize", ValueError, "y", {"y": y[:, :6], "bits": 2}),
        ("quantize", ValueError, "y", {"y": np.full((1, 8), 7e4, F32)}),  # γ past float16
        ("dequantize", TypeError, "codes", {"codes": codes.astype(np.int8)}),
        ("dequantize", ValueError, "codes", {"codes": codes[:, :4]}),  # 4 B: 10.67 codes
        ("dequantize", ValueError, "codes", {"codes": np.uint8(3)}),
        ("dequantize", TypeError, "gamma", {"gamma": gamma.astype(F32)}),
        ("dequantize", ValueError, "gamma", {"gamma": gamma[:1]}),
        ("dequantize", ValueError, "gamma", {"gamma": inf_gamma}),
    ]
    for name, exc, arg, kw in bad:
        before = copy.deepcopy(kw)
        with pytest.raises(exc, match=rf"^{arg}\b"):
            calls[name](**kw)
        for k, v in kw.items():  # the arguments are as they were
            assert np.array_equal(np.asarray(v), np.asarray(before[k]), equal_nan=True), (name, k)
    # the limit: a vector of n equal values v has u = 1 everywhere, codes the level nearest 1
    # (0.756 of 3 bits) and γ = v / 0.756; γ rounds to inf in float16 from 65520 on
    level = golden.tq_codebook(3)[5]
    assert np.isfinite(golden.tq_quantize(np.full(8, F32(65400 * level)), 3)[1])
    with pytest.raises(ValueError, match=r"^y: a vector's scale γ .* beyond float16's range"):
        golden.tq_quantize(np.full(8, F32(65600 * level)), 3)


def test_tq_caches_refuse_bad_appends_unchanged(rng):
    cfg = qwenref.AttnConfig.tiny()
    cache = golden.KVCache(cfg, 8, kind="tq3")
    k = rng.standard_normal((2, cfg.nkv, cfg.head_dim)).astype(F32)
    ik = rng.standard_normal((2, cfg.indexer_head_dim)).astype(F32)
    cache.append(k, k, index_k=ik)
    before = copy.deepcopy(cache.__dict__)
    big, nan = k.copy(), k.copy()
    big[1, 0] = 1e6  # a rotated row of rms 1e6: γ past float16
    nan[0, 1, 3] = np.nan
    for kw, name in (
        ({"k": big, "v": k}, "k"),
        ({"k": k, "v": big}, "v"),
        ({"k": nan, "v": k}, "k"),
    ):
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            cache.append(index_k=ik, **kw)
        after = cache.__dict__
        assert after.keys() == before.keys() and len(cache) == 2
        for s in ("k_store", "v_store"):
            assert all(np.array_equal(after[s][a], before[s][a]) for a in before[s])
    for bad in ("tq5", "tq"):
        with pytest.raises(ValueError, match="^kind"):
            golden.KVCache(cfg, 8, kind=bad)


@pytest.mark.parametrize("bits,most", [(2, 1e-6), (3, 3e-5), (4, 1e-4)])
def test_decode_table_scale_puts_the_codebook_where_fp16_holds_it(bits, most):
    """The tensor-core decode's table holds fp16(f C): f in [1, 2), a multiple of 2^-20, rounds
    the codebook at most `most` relative (u16 = 4.9e-4; at f = 1 the error is 2e-4 to 3e-4),
    and no f of the grid does better."""
    from qwenref.gpu.kvcache import tq_fp16_scale

    def err(f):
        v = golden.tq_codebook(bits).astype(np.float64) * f
        return np.abs(v.astype(np.float16).astype(np.float64) / v - 1.0).max()

    f = float(tq_fp16_scale(bits))
    assert 1.0 <= f < 2.0 and f * 2**20 == int(f * 2**20)
    assert err(f) <= most < err(1.0)
    grid = 1.0 + np.arange(0, 1 << 20, 997) / (1 << 20)  # a sample of the grid
    assert err(f) <= min(err(g) for g in grid)


def test_gpu_decode_plan_of_tq_kinds():
    """The GPU decode of a tq cache runs on the mma rung alone; the tiny config's head_dim 64 is
    not one of mma's, and the plan says so by name before anything runs (no GPU is needed to
    plan). tests/test_attention_dispatch.py plans the shapes mma takes."""
    from qwenref.gpu.attention import plan

    for kind in layout.TQ_KINDS:
        cache = qwenref.golden.KVCache(qwenref.AttnConfig.tiny(), 8, kind=kind)
        with pytest.raises(ValueError, match=rf"^cache kinds \({kind}, {kind}\) decode on the mma"):
            plan(cache, 1, gpu=False)


# ---- error on vectors with outlier channels -------------------------------------------------
def outlier_vectors(n_vec=1024, hd=256, seed=0):
    """What a reader builds: unit normal vectors of head_dim 256 whose channels 3, 70, 141 and
    200 are multiplied by 10 (before any rotation), the outlier channels real keys have."""
    x = np.random.default_rng(seed).standard_normal((n_vec, hd)).astype(F32)
    x[:, [3, 70, 141, 200]] *= F32(10)
    return x


def relative_mse(kind, x):
    """Σ ‖x̂ − x‖² / Σ ‖x‖², x̂ the value a cache side of `kind` returns for x: rotated as the
    cache rotates (turbo: wht(x); tq: wht(s ⊙ x)), quantized, dequantized and rotated back."""
    s = layout.rotation_signs(kind, x.shape[-1])
    y = golden.wht_signed(x, s)
    if kind.startswith("tq"):
        b = layout.tq_bits(kind)
        yh = golden.tq_dequantize(*golden.tq_quantize(y, b), b)
    else:
        b = layout.turbo_bits(kind)
        yh = golden.turbo_dequantize(*golden.turbo_quantize(y, b), b)
    back = golden.wht_signed(yh, s, inverse=True).astype(F64)
    return float(np.sum((back - x) ** 2) / np.sum(x.astype(F64) ** 2))


def test_relative_mse_on_outlier_vectors():
    x = outlier_vectors()
    mse = {k: relative_mse(k, x) for k in ("tq2", "tq3", "tq4", "turbo2", "turbo3", "turbo4")}
    # After the rotation the values are close to normal, so each tq-b sits near the normal's
    # Lloyd–Max distortion D_b (0.1175, 0.03454, 0.009497) and below it: the outlier channels
    # add a few ±offsets to every rotated value, a mixture with lighter tails than the normal
    # (measured over seeds 0-3: tq2 0.1033-0.1040, tq3 0.0309-0.0311, tq4 0.00862-0.00864).
    assert mse["tq4"] <= 0.0088  # the design figure; measured 0.00864
    assert mse["tq3"] <= 0.032  # the design figure; measured 0.0311
    # tq2: a 2-bit scalar quantizer of near-normal values does not go far below D_2, so the
    # bound is D_2 less 5 % (measured 0.1040; without the rotation it is several times more)
    assert mse["tq2"] <= 0.95 * PUBLISHED_MSE[2]
    # at equal storage (tq3: 3 + 1/16 bits a value, turbo2: 2 + 1; tq4 against turbo3) at
    # most half of turbo's error (measured 0.21 and 0.33 of it)
    assert mse["tq3"] <= 0.5 * mse["turbo2"]
    assert mse["tq4"] <= 0.5 * mse["turbo3"]
    # the rotation is what makes the codebook fit: without it the outliers set the scale
    # (measured 0.32, ten times the rotated error)
    raw = golden.tq_dequantize(*golden.tq_quantize(x, 3), 3)
    assert np.sum((raw - x).astype(F64) ** 2) / np.sum(x.astype(F64) ** 2) > 2 * mse["tq3"]


# ---- the golden layer on a tq cache ---------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_layer(tmp_path_factory):
    cfg = qwenref.AttnConfig.tiny()  # head_dim 64, indexer: rows from 39 on are selective
    path = tmp_path_factory.mktemp("ckpt")
    qwenref.write_random_checkpoint(path, cfg, seed=0)
    ck = qwenref.load_checkpoint(path)
    return cfg, ck.layer(ck.full_attention_layers[0])


def test_layer_error_below_turbo_at_equal_storage(tiny_layer):
    cfg, w = tiny_layer
    xs = np.random.default_rng(10).standard_normal((96, cfg.hidden_size)).astype(F32)
    layer = golden.FullAttentionLayer(cfg, w)
    ref = layer.forward(xs, 0, golden.KVCache(cfg, 96, "f32"))
    err = {}
    for kind in ("tq4", "tq3", "tq2", "turbo3", "turbo2"):
        y = layer.forward(xs, 0, golden.KVCache(cfg, 96, kind))
        err[kind] = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    # 96 rows, dense and selective, against the f32 cache's output (measured: tq4 0.023,
    # turbo3 0.046, tq3 0.045, turbo2 0.105, tq2 0.083); tq at hd 64 costs 1/4 bit more than
    # b, turbo-n a whole bit more than n
    assert 0 < err["tq4"] < err["turbo3"]
    assert 0 < err["tq3"] < err["turbo2"]
    assert err["tq4"] < err["tq3"] < err["tq2"]


@pytest.mark.parametrize(
    "kind, n_splits, sparse_v", [("tq4", None, 0.0), ("tq3", 3, 0.0), ("tq2", 1, 0.02)]
)
def test_layer_attends_to_the_dequantized_unrotated_cache(tiny_layer, kind, n_splits, sparse_v):
    """The layer's rotated attention (q' = wht(s ⊙ q) against the stored keys, the output
    turned back by s ⊙ wht(o)) equals plain attention on the stored vectors rotated back,
    s ⊙ wht(ŷ), row by row, dense rows and selective ones, to float32 rounding."""
    cfg, w = tiny_layer
    layer = golden.FullAttentionLayer(cfg, w, sparse_v=sparse_v, n_splits=n_splits)
    cache = golden.KVCache(cfg, 48, kind)
    xs = np.random.default_rng(11).standard_normal((46, cfg.hidden_size)).astype(F32)
    layer.forward(xs[:38], 0, cache)
    trace = {}
    layer.forward(xs[38:], 38, cache, trace=trace)  # rows 38..45: 38 dense, 39.. selective
    s = layout.tq_signs(cfg.head_dim)
    assert np.array_equal(cache.k_signs, s) and np.array_equal(cache.v_signs, s)
    K = golden.wht_signed(cache.keys(), s, inverse=True)  # [nkv, T, hd], unrotated
    V = golden.wht_signed(cache.values(), s, inverse=True)
    n_sel = 0
    for b, (idx, _) in enumerate(trace["selections"]):
        n_sel += len(idx) < 38 + b + 1
        o = golden.decode_attention(trace["q"][b], K[:, idx], V[:, idx], n_splits, sparse_v)
        want = golden.output_gate(o, trace["gate"][b])
        got = trace["attn_heads"][b]
        # float32 rounding only: the rotations of q, of the stored rows back and of the output
        # (each within ~1 ulp of a row's norm per value), and score differences of that size
        # through the softmax; 2**-18 of the row's norm leaves a margin of ~30x over what is
        # seen (~1e-7); an unfolded sign pattern gives errors of order 1
        scale = np.linalg.norm(want, axis=-1, keepdims=True)
        assert np.all(np.abs(got - want) <= 2.0**-18 * scale), (b, np.abs(got - want).max())
    assert n_sel >= 6  # the selective rows were part of it
