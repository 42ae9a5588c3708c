#!/usr/bin/env python3
"""How a file sits in the page cache: the share of its pages that are parts
of large folios, which changes what mapping the file costs (and so the
floor program's time, and every ratio to it: bench/RESULTS.md).

    bench/page_cache.py FILE              prints e.g. "82757 pages, 99.4 % in large folios"
    bench/page_cache.py --small SRC DEST  copies SRC to DEST in 4 KiB writes: small folios
    bench/page_cache.py --large FILE      evicts FILE's pages and reads it back: large folios

Reading folio sizes needs root (/proc/self/pagemap's frame numbers and
/proc/kpageflags); without it the first form prints "unknown". The other two
touch only the named files (posix_fadvise), never the rest of the host's cache.
"""
import ctypes
import mmap
import os
import struct
import sys

KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 1 << 15, 1 << 16
PFN_MASK = (1 << 55) - 1
PRESENT = 1 << 63


def share(path):
    """(pages, pages in large folios), or None without the right to look."""
    page = mmap.PAGESIZE
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return (0, 0)
        # A private mapping that is only read maps the page cache's own pages.
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    n = (size + page - 1) // page
    # Touching a page maps it, reading it in first if it was not cached: ask
    # this of a file the caller has just put in the cache.
    for i in range(n):
        m[i * page]
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    try:
        with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
            pm.seek(addr // page * 8)
            entries = struct.unpack(f"<{n}Q", pm.read(n * 8))
            pages = large = 0
            for e in entries:
                pfn = e & PFN_MASK
                if not e & PRESENT or pfn == 0:
                    continue
                pages += 1
                kf.seek(pfn * 8)
                (flags,) = struct.unpack("<Q", kf.read(8))
                large += bool(flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))
            return (pages, large)
    except OSError:  # no root: no /proc/kpageflags
        return None


def small(src, dest):
    """`dest`, a copy of `src` written 4 KiB at a time, then flushed."""
    with open(src, "rb") as i, open(dest, "wb") as o:
        while chunk := i.read(4096):
            o.write(chunk)
            o.flush()
        os.fsync(o.fileno())


def large(path):
    """`path`'s cached pages dropped and read back in one stream."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        while f.read(1 << 20):
            pass


def main(argv):
    if len(argv) == 3 and argv[0] == "--small":
        small(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "--large":
        large(argv[1])
    elif len(argv) == 1 and not argv[0].startswith("--"):
        s = share(argv[0])
        if s is None:
            print("unknown (folio sizes need root)")
        else:
            pages, big = s
            pct = 100.0 * big / pages if pages else 0.0
            print(f"{pages} pages, {pct:.1f} % in large folios")
    else:
        print("usage: page_cache.py FILE | --small SRC DEST | --large FILE", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
