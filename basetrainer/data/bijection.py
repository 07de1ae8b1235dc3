"""Seeded bijections of ``[0, n)`` computed one value at a time: a shuffle that costs nothing to hold.

A permutation of a billion samples as an array is 8 GB; as a function it is a key. :func:`permute` is a
Feistel network of 4 rounds (Luby and Rackoff's construction, whose rounds here are SplitMix64's finaliser) over
the smallest ``4^h >= n``, walked again from any value that lands at or past ``n`` ("cycle walking", Black and
Rogaway): every value of ``[0, n)`` goes to exactly one of ``[0, n)``, in about 4 passes at worst on average, and
:func:`unpermute` goes back. Both work on NumPy arrays of positions, each with its own ``n`` and key, so that a
block of positions spanning several windows of an order is one vectorised call.
"""
import numpy as np

ROUNDS = 4
BLOCK = 65_536  # values walked at once
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_ROUND_KEYS = [np.uint64((round_ + 1) * 0x9E3779B97F4A7C15 % 2**64) for round_ in range(ROUNDS)]


def mix64(values) -> np.ndarray:
    """SplitMix64's finaliser: a uint64 array's values scrambled, every bit depending on every other."""
    z = np.asarray(values, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def key_of(*numbers) -> np.uint64:
    """One 64-bit key from integers (a seed, an epoch, a window...): each mixed into the last."""
    key = np.zeros(1, dtype=np.uint64)
    for number in numbers:
        key = mix64(key ^ np.asarray([int(number) % 2**64], dtype=np.uint64))
    return key[0]


def permute(values, n, keys) -> np.ndarray:
    """``values`` (int64, each in ``[0, n)``) through the bijection of ``[0, n)`` that ``keys`` names; ``n`` and
    ``keys`` are scalars or arrays as long as ``values``."""
    return _in_blocks(values, n, keys, forward=True)


def unpermute(values, n, keys) -> np.ndarray:
    """The inverse of :func:`permute`: ``unpermute(permute(v, n, k), n, k) == v``."""
    return _in_blocks(values, n, keys, forward=False)


def _in_blocks(values, n, keys, forward):
    """:func:`_walk` a block at a time, so that its temporaries stay small whatever the values."""
    values = np.asarray(values, dtype=np.int64).reshape(-1)
    if values.size <= BLOCK:
        return _walk(values, n, keys, forward)
    n, keys = np.broadcast_to(n, values.shape), np.broadcast_to(keys, values.shape)
    out = np.empty_like(values)
    for first in range(0, values.size, BLOCK):
        block = slice(first, first + BLOCK)
        out[block] = _walk(values[block], n[block], keys[block], forward)
    return out


def _walk(values, n, keys, forward):
    x = np.array(values, dtype=np.uint64, ndmin=1)
    n = np.broadcast_to(np.asarray(n, dtype=np.uint64), x.shape)
    keys = np.broadcast_to(np.asarray(keys, dtype=np.uint64), x.shape)
    bits = np.maximum(2, np.ceil(np.log2(np.maximum(n, 1).astype(np.float64)))).astype(np.uint64)
    high, low = bits - bits // np.uint64(2), bits // np.uint64(2)
    out = np.empty_like(x)
    todo = None
    while True:  # cycle walking: a value outside [0, n) goes round again until it lands inside
        if todo is None:
            x = _feistel(x, high, low, keys, forward)
            outside = np.flatnonzero(x >= n)
            out[:] = x
        else:
            x = _feistel(x, high[todo], low[todo], keys[todo], forward)
            inside = x < n[todo]
            out[todo[inside]] = x[inside]
            outside = todo[~inside]
            x = x[~inside]
        if not outside.size:
            return out.astype(np.int64)
        if todo is None:
            x = x[outside]
        todo = outside


def _feistel(x, high, low, keys, forward):
    """Unbalanced Feistel rounds over ``high + low`` bits: each round swaps the halves' roles (and widths)."""
    rounds = range(ROUNDS) if forward else range(ROUNDS - 1, -1, -1)
    widths = (high, low)
    if not forward and ROUNDS % 2:
        widths = (low, high)
    for round_ in rounds:
        subkey = keys ^ _ROUND_KEYS[round_]
        if forward:  # (left: a bits, right: c bits) -> (right, left ^ f(right)) as (c bits, a bits)
            a, c = widths
            left, right = x >> c, x & ((np.uint64(1) << c) - np.uint64(1))
            x = (right << a) | (left ^ (mix64(right ^ subkey) & ((np.uint64(1) << a) - np.uint64(1))))
            widths = (c, a)
        else:  # undoes a round that left (c bits, a bits)
            c, a = widths
            mask_a = (np.uint64(1) << a) - np.uint64(1)
            right, mixed = x >> a, x & mask_a
            x = ((mixed ^ (mix64(right ^ subkey) & mask_a)) << c) | right
            widths = (a, c)
    return x
