"""Paged KV cache with prefix caching (vLLM-style), counted rather than materialized.

Blocks hold ``block_size`` tokens. A *full* block whose KV has been computed can be *registered* under a
chained hash (hash of the parent block's hash and the block's token ids), so a later request whose prompt
starts with the same tokens reuses it. Registered blocks are reference counted; when the count drops to
zero they stay cached in an LRU list and are evicted (least recently freed first) only when a new
allocation needs room. Unregistered blocks are anonymous: only their number matters.

The scheduler tracks which blocks each sequence holds; this class owns the global accounting.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(ids: Sequence[int], block_size: int, parent: int = 0, start_block: int = 0) -> list[int]:
    """Chained hashes of the full blocks of ``ids`` from block ``start_block`` (``parent`` = hash before
    it)."""
    out = []
    h = parent
    n_full = len(ids) // block_size
    for b in range(start_block, n_full):
        h = hash((h, tuple(ids[b * block_size:(b + 1) * block_size])))
        out.append(h)
    return out


class KVCache:
    """Block accounting for one engine replica (all its attention ranks together)."""

    __slots__ = ("capacity", "block_size", "prefix_caching", "n_anon", "ref", "lru", "queries", "hits",
                 "evictions", "epoch")

    def __init__(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True) -> None:
        self.capacity = int(num_blocks)
        self.block_size = int(block_size)
        self.prefix_caching = prefix_caching
        self.n_anon = 0  # referenced anonymous blocks
        self.ref: dict[int, int] = {}  # registered block hash -> reference count
        self.lru: OrderedDict[int, None] = OrderedDict()  # registered blocks with no reference, oldest first
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of which found cached
        self.evictions = 0
        self.epoch = 0  # bumped whenever blocks are freed (room may have grown)

    # ------------------------------------------------------------------ capacity
    def available(self) -> int:
        """Blocks that an allocation can get now (free + evictable)."""
        return self.capacity - self.n_anon - len(self.ref) + len(self.lru)

    def used(self) -> int:
        """Blocks referenced by running sequences."""
        return self.n_anon + len(self.ref) - len(self.lru)

    def usage(self) -> float:
        return self.used() / self.capacity if self.capacity else 0.0

    def allocate(self, n: int) -> bool:
        """Take ``n`` anonymous blocks, evicting cached ones if needed; False (and no change) if
        impossible."""
        if n <= 0:
            return True
        free = self.capacity - self.n_anon - len(self.ref)
        if free < n:
            short = n - free
            if short > len(self.lru):
                return False
            lru, ref = self.lru, self.ref
            for _ in range(short):
                h, _none = lru.popitem(last=False)
                del ref[h]
            self.evictions += short
        self.n_anon += n
        return True

    # ------------------------------------------------------------------ prefix caching
    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` are cached (no side effects)."""
        if not self.prefix_caching:
            return 0
        ref = self.ref
        n = 0
        for h in hashes:
            if h not in ref:
                break
            n += 1
        return n

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference cached blocks (all must be registered); they leave the LRU list."""
        ref, lru = self.ref, self.lru
        for h in hashes:
            c = ref[h]
            if c == 0:
                del lru[h]
            ref[h] = c + 1

    def register(self, h: int) -> bool:
        """Turn one of the caller's anonymous blocks into a registered block ``h`` (reference 1).

        Returns False (the block stays anonymous) when caching is off or ``h`` is already registered.
        """
        if not self.prefix_caching or h in self.ref:
            return False
        self.ref[h] = 1
        self.n_anon -= 1
        return True

    def release(self, hashes: Sequence[int], n_anon: int) -> None:
        """Drop one reference on each of ``hashes`` and free ``n_anon`` anonymous blocks.

        Blocks are freed tail first, so a sequence's last blocks are evicted before its first ones.
        """
        self.n_anon -= n_anon
        self.epoch += 1
        ref, lru = self.ref, self.lru
        for h in reversed(hashes):
            c = ref[h] - 1
            ref[h] = c
            if c == 0:
                lru[h] = None

    def unreferenced(self, hashes: Sequence[int]) -> int:
        """How many of ``hashes`` (all registered) no sequence references: acquiring them shrinks the room."""
        ref = self.ref
        return sum(1 for h in hashes if ref[h] == 0)

    def reset_prefix_cache(self) -> None:
        self.epoch += 1
        for h in list(self.lru):
            del self.ref[h]
        self.lru.clear()
