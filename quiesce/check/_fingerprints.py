"""The explorer's compact visited set: 64-bit state fingerprints mapped to state numbers.

What lives here: `FingerprintTable`, an open-addressing hash table (linear probing) held in
two flat arrays, one 8-byte fingerprint and one 4-byte state number per slot, kept at most
half full. What it does not know: what a state is (the explorer passes `hash(state)`).

Why not a `dict`. A `dict` from fingerprint to number holds two Python `int` objects per
state (a 64-bit one is 36 bytes, a number 28) besides its own 24-byte entry: about 110
bytes a state. Here a state costs 12 bytes a slot at 2-4 slots a state (the table doubles
when half full): 24-48 bytes, and no object at all. The price is a probe loop in Python,
well under a microsecond a lookup, small beside computing a successor (tens).

The price of fingerprints (TLC's and SPIN's): two distinct states with one fingerprint
count as one, and the second is never explored. With n states and fingerprints spread
uniformly over 2**64 values, the chance of any collision is about n**2 / 2**65 (the
birthday bound): 3e-8 at a million states, 3e-4 at a hundred million. The explorer's
`exact=True` keeps whole states instead and has no such risk.

>>> table = FingerprintTable()
>>> table.number(hash("s0"), 0), table.number(hash("s0"), 1), len(table)
(-1, 0, 1)
"""

from __future__ import annotations

from array import array

__all__ = ["FingerprintTable"]

_EMPTY = 0
_MAX_NUMBER = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_SIGN = 1 << 63
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio, odd


class FingerprintTable:
    """Fingerprint -> state number, in `12 * capacity` bytes (see the module doc)."""

    __slots__ = ("_count", "_fingerprints", "_mask", "_numbers", "_shift", "_zero")

    def __init__(self, log2_capacity: int = 10) -> None:
        self._allocate(log2_capacity)
        self._count = 0
        self._zero = -1  # the number of fingerprint 0, which marks empty slots in the array

    def _allocate(self, log2: int) -> None:
        """Empty arrays of `2**log2` slots."""
        self._mask = (1 << log2) - 1
        self._shift = 64 - log2
        self._fingerprints = array("q", bytes(8 << log2))
        self._numbers = array("I", bytes(4 << log2))

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """The bytes the table's arrays hold."""
        return self._fingerprints.itemsize * len(self._fingerprints) + (
            self._numbers.itemsize * len(self._numbers)
        )

    def number(self, fingerprint: int, new: int) -> int:
        """The number of the state with `fingerprint`; if none has it yet, record `new`
        as its number and return -1. `fingerprint` is any int (`hash()` of a state)."""
        if not -_SIGN <= fingerprint < _SIGN:
            # `hash()` already is a signed 64-bit int on 64-bit platforms; fold anything wider.
            fingerprint &= _MASK64
            fingerprint -= (fingerprint & _SIGN) << 1
        if fingerprint == _EMPTY:
            return self._number_of_zero(new)
        fingerprints, mask = self._fingerprints, self._mask
        # Fibonacci hashing (the top bits of the product) picks the slot from all 64 bits:
        # `hash()` of a small int is the int itself, whose low bits alone would cluster.
        slot = (fingerprint * _GOLDEN & _MASK64) >> self._shift
        while True:
            there = fingerprints[slot]
            if there == fingerprint:
                return self._numbers[slot]
            if there == _EMPTY:
                break
            slot = (slot + 1) & mask
        _check_number(new)
        fingerprints[slot] = fingerprint
        self._numbers[slot] = new
        self._count += 1
        if self._count * 2 > mask:
            self._grow()
        return -1

    def _number_of_zero(self, new: int) -> int:
        if self._zero >= 0:
            return self._zero
        _check_number(new)
        self._zero = new
        self._count += 1
        return -1

    def _grow(self) -> None:
        old = zip(self._fingerprints, self._numbers, strict=True)
        self._allocate((self._mask + 1).bit_length())  # double
        fingerprints, numbers = self._fingerprints, self._numbers
        mask, shift = self._mask, self._shift
        for fingerprint, number in old:
            if fingerprint == _EMPTY:
                continue
            slot = (fingerprint * _GOLDEN & _MASK64) >> shift
            while fingerprints[slot] != _EMPTY:
                slot = (slot + 1) & mask
            fingerprints[slot] = fingerprint
            numbers[slot] = number


def _check_number(number: int) -> None:
    if not 0 <= number <= _MAX_NUMBER:
        raise OverflowError(f"state number {number} does not fit the table's 32-bit numbers")
