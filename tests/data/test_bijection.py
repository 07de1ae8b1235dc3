"""Seeded bijections of [0, n) computed value by value (basetrainer.data.bijection): what the epoch's orders are
made of."""
import numpy as np
import pytest

from basetrainer.data.bijection import key_of, permute, unpermute


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 64, 1000, 4097, 65_537])
def test_permute_sends_every_value_of_the_range_to_exactly_one_value_of_the_range(n):
    values = permute(np.arange(n), n, key_of(3, 1))
    assert np.array_equal(np.sort(values), np.arange(n))


@pytest.mark.parametrize("n", [1, 7, 1000, 65_537])
def test_unpermute_undoes_permute(n):
    key = key_of(9, 4)
    assert np.array_equal(unpermute(permute(np.arange(n), n, key), n, key), np.arange(n))


def test_each_value_may_carry_its_own_range_and_key():
    ranges, keys = np.array([5, 1000, 3, 77] * 25), np.arange(100, dtype=np.uint64)
    values = np.arange(100) % ranges
    moved = permute(values, ranges, keys)
    assert (moved < ranges).all()
    assert np.array_equal(moved, [permute([v], n, k)[0] for v, n, k in zip(values, ranges, keys)])
    assert np.array_equal(unpermute(moved, ranges, keys), values)


def test_another_key_gives_another_order_and_the_same_key_the_same():
    first = permute(np.arange(1000), 1000, key_of(1, 0))
    assert np.array_equal(first, permute(np.arange(1000), 1000, key_of(1, 0)))
    assert not np.array_equal(first, permute(np.arange(1000), 1000, key_of(1, 1)))
    assert not np.array_equal(first, np.arange(1000))
