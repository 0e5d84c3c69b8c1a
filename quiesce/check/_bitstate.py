"""A bitstate visited set: Holzmann's supertrace, a Bloom filter of state fingerprints.

What lives here: `Bitstate`, a bit array of `2**log2_bits` bits where each state sets
`HASHES` bits picked from its 64-bit fingerprint, mixed (double hashing, Kirsch and
Mitzenmacher), and `Merged`, the union of many of them (shipped packed) with the estimate
of how many distinct states they hold (Swamidass and Baldi). What it does not know: what a
state is (callers pass `hash(state)`).

Why a bit array. A walker of the swarm meets millions of states; an exact set costs
hundreds of bytes a state, a bitstate a few bits. The price: a state whose bits are all
set already counts as seen (a false positive, below 1% while the array is under a third
full), so the walker may skip checking a state it never checked: bitstate search is
incomplete, as random walks are anyway. Arrays of one size merge by OR: the union
holds every state either holds, and its estimate counts the states of the whole swarm
without counting twice those two walkers met.

Fingerprints come from `hash()`, so two arrays merge meaningfully only when every process
that filled them hashes alike: one process, or processes started with one
`PYTHONHASHSEED` (the Ray walkers are).

>>> seen = Bitstate(16)
>>> seen.add(hash("s0")), seen.add(hash("s0"))
(True, False)
>>> round(seen.estimate())
1
"""

from __future__ import annotations

import math
import zlib

__all__ = ["HASHES", "Bitstate", "Merged"]

HASHES = 3
"""Bits set per state (SPIN's default for bitstate search)."""

_MASK64 = (1 << 64) - 1


class Bitstate:
    """A bit array of `2**log2_bits` bits holding state fingerprints (see the module doc)."""

    __slots__ = ("_bits", "_mask", "log2_bits")

    def __init__(self, log2_bits: int) -> None:
        if not 10 <= log2_bits <= 36:
            raise ValueError(f"log2_bits {log2_bits} must lie in [10, 36] (1 Kibit to 8 GiB)")
        self.log2_bits = log2_bits
        self._mask = (1 << log2_bits) - 1
        self._bits = bytearray(1 << (log2_bits - 3))

    @property
    def size(self) -> int:
        """The number of bits."""
        return self._mask + 1

    def add(self, fingerprint: int) -> bool:
        """Set the bits of `fingerprint`; True when one was clear (the state is new)."""
        # `hash()` of a small int is the int itself: mix it (splitmix64's finaliser) so
        # neighbouring fingerprints land far apart.
        z = fingerprint & _MASK64
        z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9 & _MASK64
        z = (z ^ z >> 27) * 0x94D049BB133111EB & _MASK64
        fingerprint = z ^ z >> 31
        # Double hashing: position i is h1 + i*h2. h2 odd, so with a power-of-two size
        # the positions differ.
        h1 = fingerprint & self._mask
        h2 = (fingerprint >> 32 | fingerprint << 32) & self._mask | 1
        bits = self._bits
        new = False
        for i in range(HASHES):
            at = (h1 + i * h2) & self._mask
            byte, bit = at >> 3, 1 << (at & 7)
            if not bits[byte] & bit:
                bits[byte] |= bit
                new = True
        return new

    def set_bits(self) -> int:
        """How many bits are set."""
        return int.from_bytes(self._bits, "little").bit_count()

    def estimate(self) -> float:
        """The estimated number of distinct fingerprints added (see `Merged.estimate`)."""
        return _estimate(self.set_bits(), self.size)

    def packed(self) -> bytes:
        """The array compressed (a walker's array is sparse: it ships in little space)."""
        return zlib.compress(self._bits, 1)


class Merged:
    """The union of packed `Bitstate`s of `2**log2_bits` bits, kept as one big integer:
    a merge is one OR, with no copy of the array it grows (the swarm merges every
    walker's array as it arrives, so this is the driver's main cost)."""

    __slots__ = ("_bits", "log2_bits")

    def __init__(self, log2_bits: int) -> None:
        self.log2_bits = log2_bits
        self._bits = 0

    @property
    def size(self) -> int:
        """The number of bits."""
        return 1 << self.log2_bits

    def add(self, packed: bytes) -> None:
        """Merge in the array `Bitstate.packed` returned (of the same size)."""
        raw = zlib.decompress(packed)
        if len(raw) * 8 != self.size:
            raise ValueError(
                f"cannot merge a {len(raw) * 8}-bit array into 2**{self.log2_bits} bits:"
                " give every walker the same --bitstate-bits"
            )
        self._bits |= int.from_bytes(raw, "little")

    def set_bits(self) -> int:
        """How many bits are set."""
        return self._bits.bit_count()

    def fill(self) -> float:
        """The fraction of bits set."""
        return self.set_bits() / self.size

    def estimate(self) -> float:
        """The estimated number of distinct fingerprints merged: -(m/k) ln(1 - X/m) for X
        bits set of m (infinite once every bit is set: use a larger array)."""
        return _estimate(self.set_bits(), self.size)


def _estimate(set_bits: int, size: int) -> float:
    unset = size - set_bits
    if unset == 0:
        return math.inf
    return -(size / HASHES) * math.log(unset / size)
