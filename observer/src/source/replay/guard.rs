//! Windows of a capture file mapped so that the file being cut shorter while they are mapped
//! ends the replay with a warning rather than killing it: reading a mapped page past a file's
//! new end raises SIGBUS. A SIGBUS handler finds the window the faulting address lies in, maps
//! zeroed pages over the rest of it and marks it cut; the feed tests the mark at each record.
//! A SIGBUS anywhere else goes to the handler that was in place before (the standard
//! library's, which tells a stack overflow), as without this one.
//!
//! Hand-written: memmap2 leaves the fault to the caller, and signal-hook-registry runs the
//! previous handler before the new one, where the standard library's resets SIGBUS to its
//! default action for any fault not its own (the next fault in a window would then end the
//! process). The windows in place are kept in a fixed table the handler reads with atomics only
//! (a signal handler may take no lock nor allocate); when it is full, the handler cannot be
//! installed or the file cannot be mapped, the window is read into a buffer instead.

use std::{
    fs::File,
    io,
    ops::Deref,
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering},
    },
};

use memmap2::MmapOptions;

/// Windows mapped at once in the whole process, at most (a replay has a few in flight).
const SLOTS: usize = 256;

/// A window in place: its mapped pages (from `start` to `end`, 0 when free) and whether the
/// file was cut under it.
struct Slot {
    taken: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    cut: AtomicBool,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        taken: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        cut: AtomicBool::new(false),
    }
}; SLOTS];

/// The page size, once the handler is in place (0 if it could not be installed).
static PAGE: AtomicUsize = AtomicUsize::new(0);
/// The SIGBUS action in place before ours (set once, never freed).
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
static INSTALL: OnceLock<()> = OnceLock::new();

/// Installs the handler the first time; the page size, if it is in place.
fn installed() -> Option<usize> {
    INSTALL.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
        if page == 0 || !page.is_power_of_two() {
            return;
        }
        PAGE.store(page, Ordering::Release);
        // SAFETY: zeroed sigaction structs are valid; the handler is async-signal-safe (atomics
        // and system calls only); the previous action is stored before ours can run.
        unsafe {
            let previous = Box::into_raw(Box::new(std::mem::zeroed::<libc::sigaction>()));
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            // On the alternate stack if there is one, as the standard library's handler
            // expects to be called.
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&raw mut ours.sa_mask);
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), previous) != 0 {
                PAGE.store(0, Ordering::Release);
                return;
            }
            PREVIOUS.store(previous, Ordering::Release);
            if libc::sigaction(libc::SIGBUS, &raw const ours, std::ptr::null_mut()) != 0 {
                PAGE.store(0, Ordering::Release);
            }
        }
    });
    let page = PAGE.load(Ordering::Acquire);
    (page != 0).then_some(page)
}

/// A SIGBUS: in a window, zeroed pages from the faulting one to the window's end (the access
/// is made again on return and reads zeros), and the window marked cut; anywhere else, the
/// previous handler, or the default action (the fault comes again on return, and ends the
/// process as without us).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let page = PAGE.load(Ordering::Acquire);
    // SAFETY: SIGBUS fills in the faulting address.
    let addr = unsafe { info.as_ref() }.map_or(0, |i| unsafe { i.si_addr() } as usize);
    for s in &TABLE {
        let (start, end) = (
            s.start.load(Ordering::Acquire),
            s.end.load(Ordering::Acquire),
        );
        if page != 0 && start <= addr && addr < end {
            let from = addr & !(page - 1);
            // SAFETY: the pages replaced lie in the window's own mapping, which only this
            // module reads through (as bytes: zeros are as valid as any).
            let zeros = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            s.cut.store(true, Ordering::Release);
            if zeros != libc::MAP_FAILED {
                return;
            }
            break;
        }
    }
    // SAFETY: the previous action as sigaction gave it; calling it as the kernel would.
    unsafe {
        let previous = PREVIOUS.load(Ordering::Acquire);
        if let Some(p) = previous.as_ref()
            && p.sa_sigaction != libc::SIG_DFL
            && p.sa_sigaction != libc::SIG_IGN
        {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(p.sa_sigaction);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(p.sa_sigaction);
                f(sig);
            }
            return;
        }
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

/// A window of a file: mapped and registered with the handler, or read into a buffer.
pub(super) enum Guarded {
    Mapped { map: memmap2::Mmap, slot: usize },
    Read(Vec<u8>),
}

impl Guarded {
    /// `len` bytes of `file` from `offset` (fewer if the file ends sooner: only when read).
    pub(super) fn new(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        if let Some(page) = installed()
            && let Some(slot) = TABLE.iter().position(|s| {
                s.taken
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
        {
            // SAFETY: the file being cut shorter while mapped is what the handler catches;
            // any other change is bytes, which the parser bounds.
            let map = unsafe {
                MmapOptions::new()
                    .offset(offset)
                    .len(len)
                    .populate()
                    .map(file)
            };
            let Ok(map) = map else {
                // A file system that cannot map the file: it is read instead.
                TABLE[slot].taken.store(false, Ordering::Release);
                return Self::read(file, offset, len);
            };
            // The mapping begins at the page holding `offset` and ends at a page's end.
            let start = map.as_ptr() as usize & !(page - 1);
            let end = (map.as_ptr() as usize + len).next_multiple_of(page);
            let s = &TABLE[slot];
            s.cut.store(false, Ordering::Relaxed);
            s.start.store(start, Ordering::Release);
            s.end.store(end, Ordering::Release);
            return Ok(Self::Mapped { map, slot });
        }
        Self::read(file, offset, len)
    }

    fn read(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; len];
        let mut have = 0;
        while have < len {
            match file.read_at(&mut buf[have..], offset + have as u64) {
                Ok(0) => break,
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(have);
        Ok(Self::Read(buf))
    }

    /// Whether the file was cut shorter than the window: its bytes from the fault on read as
    /// zeros.
    #[inline(always)]
    pub(super) fn cut(&self) -> bool {
        match self {
            Self::Mapped { slot, .. } => TABLE[*slot].cut.load(Ordering::Acquire),
            Self::Read(_) => false,
        }
    }

    /// Whether the file was cut at or before byte `at` of the window: it is read (a fault
    /// there, if cut, marks the window) and the mark tested. A file is cut from its end: a
    /// record's last byte is gone if any of it is.
    #[inline(always)]
    pub(super) fn cut_at(&self, at: usize) -> bool {
        if let Some(b) = self.get(at) {
            // A read the compiler keeps: it is what faults.
            std::hint::black_box(*b);
        }
        self.cut()
    }
}

impl Deref for Guarded {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped { map, .. } => map,
            Self::Read(buf) => buf,
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Self::Mapped { slot, .. } = self {
            // The slot is freed before the pages are unmapped (right after this): no fault
            // can come from a window being dropped, and a mapping made later at the same
            // address is never taken for it.
            let s = &TABLE[*slot];
            s.start.store(0, Ordering::Release);
            s.end.store(0, Ordering::Release);
            s.taken.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_file_cut_under_its_window_reads_as_zeros_and_is_marked_cut() {
        let path = std::env::temp_dir().join(format!("roce-observer-guard-{}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 64 << 10]).unwrap();
        let f = File::options().read(true).write(true).open(&path).unwrap();
        let w = Guarded::new(&f, 100, 60 << 10).unwrap();
        assert!(matches!(w, Guarded::Mapped { .. }));
        assert!(!w.cut_at(50 << 10));
        assert_eq!(w[50 << 10], 7);
        f.set_len(10 << 10).unwrap();
        assert!(!w.cut_at(1000));
        assert_eq!(w[1000], 7);
        assert!(w.cut_at(40 << 10));
        assert_eq!(w[40 << 10], 0);
        assert_eq!(w[(60 << 10) - 1], 0);
        drop(w);
        // Read instead of mapped: up to the file's end.
        let r = Guarded::read(&f, 4 << 10, 60 << 10).unwrap();
        assert_eq!(r.len(), 6 << 10);
        assert!(!r.cut_at(100));
        assert_eq!(r[100], 7);
        std::fs::remove_file(&path).unwrap();
    }
}
