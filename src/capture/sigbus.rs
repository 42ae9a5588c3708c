//! Mapped capture files that shrink while they are read.
//!
//! Reading a page of a file mapping that lies past the file's end raises
//! SIGBUS, which kills the process. A process-wide handler (installed once,
//! with the first mapping) turns that into a flag for mappings registered
//! here: it maps anonymous zero pages from the faulting page to the end of
//! the mapping, records that offset and returns, so the read that faulted
//! gets zeros and the reader (which looks at the offset after every record,
//! source.rs) stops at the file's new size.
//! A SIGBUS anywhere else goes to the handler that was there before (Rust's
//! stack-overflow reporter, or the default action): a real bug still crashes.
//!
//! Registered mappings live in a list of slots that are reused but never
//! freed, so the handler can walk it with atomic loads alone.

use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

struct Slot {
    /// Claimed by a live [`Guard`].
    used: AtomicBool,
    start: AtomicUsize,
    /// 0 while the slot is being filled or released: matches nothing.
    len: AtomicUsize,
    /// Offset in the mapping from which zero pages replace the file (`usize::MAX`: none).
    zeroed: AtomicUsize,
    next: AtomicPtr<Slot>,
}

static HEAD: AtomicPtr<Slot> = AtomicPtr::new(ptr::null_mut());
/// The SIGBUS action before ours, for faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// A registered mapping; unregisters it when dropped (drop it before unmapping).
pub(crate) struct Guard(&'static Slot);

impl Guard {
    /// Offset from which the mapping reads zeros because a read there faulted
    /// (the file shrank, or an I/O error); `usize::MAX` while none did.
    #[inline]
    pub(crate) fn zeroed_from(&self) -> usize {
        self.0.zeroed.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.len.store(0, Ordering::Release);
        self.0.used.store(false, Ordering::Release);
    }
}

/// Registers the read-only mapping `[start, start + len)`.
pub(crate) fn register(start: *const u8, len: usize) -> Guard {
    install();
    let slot = claim();
    slot.zeroed.store(usize::MAX, Ordering::Relaxed);
    slot.start.store(start as usize, Ordering::Relaxed);
    slot.len.store(len, Ordering::Release);
    Guard(slot)
}

fn claim() -> &'static Slot {
    let mut p = HEAD.load(Ordering::Acquire);
    // SAFETY: slots are leaked boxes, never freed.
    while let Some(s) = unsafe { p.as_ref() } {
        if s.used.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return s;
        }
        p = s.next.load(Ordering::Acquire);
    }
    let s: &'static Slot = Box::leak(Box::new(Slot {
        used: AtomicBool::new(true),
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        zeroed: AtomicUsize::new(usize::MAX),
        next: AtomicPtr::new(ptr::null_mut()),
    }));
    let mut head = HEAD.load(Ordering::Acquire);
    loop {
        s.next.store(head, Ordering::Relaxed);
        match HEAD.compare_exchange(head, s as *const Slot as *mut Slot, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return s,
            Err(h) => head = h,
        }
    }
}

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain sigaction calls; the handler only does async-signal-safe work.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, ptr::null(), &mut old);
            let _ = PREVIOUS.set(old);
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            // On the alternate stack when there is one, as Rust's own handler.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, ptr::null_mut());
        }
    });
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo; slots are never freed.
    let addr = unsafe { (*info).si_addr() } as usize;
    let mut p = HEAD.load(Ordering::Acquire);
    while let Some(s) = unsafe { p.as_ref() } {
        let len = s.len.load(Ordering::Acquire);
        let start = s.start.load(Ordering::Relaxed);
        if len > 0 && addr >= start && addr - start < len {
            let page = (addr & !(PAGE.load(Ordering::Relaxed) - 1)).max(start);
            // SAFETY: replaces pages of our own read-only mapping (from the faulting
            // page to its end) with zero pages; mmap is async-signal-safe.
            let r = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    start + len - page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                s.zeroed.fetch_min(page - start, Ordering::AcqRel);
                return;
            }
            break;
        }
        p = s.next.load(Ordering::Acquire);
    }
    not_ours(sig, info, ctx);
}

/// Hands the signal to the previous action, or to the default one (which,
/// once this handler returns, ends the process with SIGBUS as before).
fn not_ours(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: sigaction and raise are async-signal-safe; the previous handler
    // was installed for SIGBUS and expects these arguments.
    unsafe {
        if let Some(old) = PREVIOUS.get()
            && old.sa_sigaction != libc::SIG_DFL
            && old.sa_sigaction != libc::SIG_IGN
        {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(old.sa_sigaction);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
                f(sig);
            }
            return;
        }
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(libc::SIGBUS, &dfl, ptr::null_mut());
        // A fault re-faults on return; a sent SIGBUS needs raising again.
        libc::raise(libc::SIGBUS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mapped_file(dir: &tempfile::TempDir, name: &str, pages: usize) -> (std::fs::File, memmap2::Mmap) {
        let path = dir.path().join(name);
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        f.write_all(&vec![7u8; pages * 4096]).unwrap();
        // SAFETY: the test owns the file; truncating it is what is tested.
        let m = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        (f, m)
    }

    #[test]
    fn a_registered_mapping_reads_zeros_past_the_new_end_and_is_flagged() {
        let dir = tempfile::tempdir().unwrap();
        let (f, m) = mapped_file(&dir, "f", 8);
        let g = register(m.as_ptr(), m.len());
        assert_eq!(m[5 * 4096], 7);
        assert_eq!(g.zeroed_from(), usize::MAX);
        f.set_len(2 * 4096 + 100).unwrap();
        // SAFETY: volatile reads of the mapping; past the end they fault and are handled.
        let past = unsafe { ptr::read_volatile(m.as_ptr().add(5 * 4096)) };
        assert_eq!(past, 0);
        assert_eq!(g.zeroed_from(), 5 * 4096);
        assert_eq!(unsafe { ptr::read_volatile(m.as_ptr().add(4096)) }, 7, "bytes before the cut are intact");
        drop(g);
        drop(m);
    }

    /// A SIGBUS outside every registered mapping still kills (checked in a forked child).
    #[test]
    fn a_fault_elsewhere_still_kills_with_sigbus() {
        let dir = tempfile::tempdir().unwrap();
        let (_f1, m1) = mapped_file(&dir, "registered", 2);
        let _g = register(m1.as_ptr(), m1.len());
        let (f2, m2) = mapped_file(&dir, "not registered", 3);
        f2.set_len(0).unwrap();
        // SAFETY: the child only reads memory and exits; no locks are taken.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let v = unsafe { ptr::read_volatile(m2.as_ptr().add(4096)) };
            unsafe { libc::_exit(i32::from(v) + 10) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status), "child exited normally ({status:#x}): the fault was swallowed");
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS);
    }
}
