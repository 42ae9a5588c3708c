#!/usr/bin/env python3
"""How a file sits in the page cache: the share of its pages that are parts
of large folios, which changes what mapping the file costs (and so the
floor program's time, and every ratio to it: bench/RESULTS.md).

    bench/page_cache.py FILE              prints e.g. "82757 pages, 99.4 % in large folios"
    bench/page_cache.py --small SRC DEST  copies SRC to DEST in 4 KiB writes: small folios
    bench/page_cache.py --large FILE      evicts FILE's pages and reads it back: large folios
    bench/page_cache.py --hold FILE       keeps FILE's pages cached (mlock) until killed

Reading folio sizes needs root (/proc/self/pagemap's frame numbers and
/proc/kpageflags); without it the first form prints "unknown". The next two
touch only the named files (posix_fadvise), never the rest of the host's cache.

`--hold` is for the benches: on a host that pages cold page cache out (this
VM's DAMON does, ~5 MB/s on average), a capture read every second still lost
pages between runs, and each run of it waited on 0-55 reads from disk (major
faults); those waits added ~11 ms to every run and moved the ratios between
runs toward 1 (bench/RESULTS.md, twenty-seventh session). Locked, the pages
stay where they are (folio sizes too). It prints one line once the file is
locked, then waits, and ends on SIGTERM or when its parent does (the bench
that started it); or it says why the file is not held, and ends at once.
"""
import ctypes
import mmap
import os
import signal
import struct
import sys
import time

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


def hold(path):
    """Locks `path`'s pages in memory: a shared, read-only mapping (no
    copies), locked whole; then waits until killed or orphaned."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    parent = os.getppid()
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 0  # the parent ended before the signal was asked for
    try:
        f = open(path, "rb")
    except OSError as e:
        print(f"{path}: not held (cannot open it: {e.strerror})", flush=True)
        return 1
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            print(f"{path}: not held (empty)", flush=True)
            return 1
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
    if not addr or addr == ctypes.c_void_p(-1).value:
        print(f"{path}: not held (cannot map it: {os.strerror(ctypes.get_errno())})", flush=True)
        return 1
    if libc.mlock(addr, size) != 0:
        print(f"{path}: not held (mlock: {os.strerror(ctypes.get_errno())}; needs root or a larger RLIMIT_MEMLOCK)", flush=True)
        return 1
    print(f"{path}: {size} bytes held in the page cache (mlock)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while os.getppid() == parent:
        time.sleep(1)
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "--small":
        small(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "--large":
        large(argv[1])
    elif len(argv) == 2 and argv[0] == "--hold":
        return hold(argv[1])
    elif len(argv) == 1 and not argv[0].startswith("--"):
        s = share(argv[0])
        if s is None:
            print("unknown (folio sizes need root)")
        else:
            pages, big = s
            pct = 100.0 * big / pages if pages else 0.0
            print(f"{pages} pages, {pct:.1f} % in large folios")
    else:
        print("usage: page_cache.py FILE | --small SRC DEST | --large FILE | --hold FILE", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
