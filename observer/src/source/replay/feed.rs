//! The input: [`Feed`] streams a reader through a buffer, maps a regular file a window at a
//! time, or walks bytes already in memory, and hands the bytes to a record parser one [`Step`]
//! at a time.

use std::{
    fs::File,
    io::{self, Read},
    ops::Deref,
};

use pcap_file::PcapError;

use super::guard::Guarded;

/// What a step over the buffered bytes did.
pub(super) enum Step {
    /// Consumed this many bytes.
    Used(usize),
    /// Needs more bytes than are buffered.
    More,
    Fail(PcapError),
}

pub(super) enum FeedError {
    Io(io::Error),
    /// The input ended inside a record.
    Cut,
    /// A record longer than [`Feed::MAX_RECORD`]: a corrupt length field.
    TooLong,
    /// The mapped file was cut shorter than the record while it was read.
    Shrunk,
    Parse(PcapError),
}

impl FeedError {
    pub(super) fn describe(&self) -> String {
        match self {
            Self::Io(e) => format!("read error: {e}"),
            Self::Cut => "cut short by the end of the file".to_string(),
            Self::TooLong => format!(
                "record length larger than any frame (over {} MiB: corrupt record header)",
                Feed::<io::Empty>::MAX_RECORD >> 20
            ),
            Self::Shrunk => "the file was cut shorter while it was read".to_string(),
            Self::Parse(PcapError::InvalidField(what)) => format!("invalid field: {what}"),
            Self::Parse(e) => e.to_string(),
        }
    }
}

/// The input: a reader streamed through a buffer small enough to stay in cache (grown only for
/// a record that does not fit), a regular file mapped a window at a time, or bytes already in
/// memory. Records are parsed by pcap-file's slice parsers either way.
pub(super) struct Feed<'a, R> {
    r: Option<R>,
    buf: Vec<u8>,
    mapped: &'a [u8],
    /// A regular file mapped a window at a time (`r` is none then).
    win: Option<Window>,
    start: usize,
    end: usize,
    eof: bool,
    /// Where the record [`Feed::next`] consumed last begins: its bytes stay in place until the
    /// next call, so a frame in it can be accounted after the parser has returned.
    record: usize,
    /// Sharded replay: a buffer read to its end is handed over whole, its frames accounted on
    /// other threads, rather than compacted in place ([`Feed::handing_over`]).
    handover: Option<Handover>,
}

/// The buffers of a feed that hands them over: the next one to fill, and the one given up last
/// (with every frame read before the record being cut).
struct Handover {
    chunk: usize,
    spare: Option<Vec<u8>>,
    retired: Option<Chunk>,
}

/// Bytes of the input handed over: a buffer read into, or a window of a mapped file.
pub(super) enum Chunk {
    Read(Vec<u8>),
    Mapped(Guarded),
}

impl Deref for Chunk {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Self::Read(v) => v,
            Self::Mapped(m) => m,
        }
    }
}

impl Default for Chunk {
    fn default() -> Self {
        Self::Read(Vec::new())
    }
}

/// A regular file mapped a window at a time. Reading a cached file with `read()` stops the
/// thread while every byte is copied; through a mapping nothing is copied, and the lines ahead
/// of the parser are asked for (prefetched) while the frames before them are accounted. Without
/// asking ahead, each record would wait for memory: the next one's place is in its header.
struct Window {
    file: File,
    map: Option<Guarded>,
    /// Where the window begins in the file.
    base: u64,
    /// The window's bytes up to here are asked for already ([`Window::ahead`]).
    asked: usize,
    /// Bytes mapped at a time (more for a record that does not fit).
    len: usize,
}

/// How far ahead of the record being parsed the mapped bytes are asked for: enough for the
/// memory to keep up with a streaming parser, little enough to stay in the first-level cache.
const AHEAD: usize = 8 << 10;

impl Window {
    #[inline]
    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Whether the file was cut at or before byte `at` of the window.
    #[inline(always)]
    fn cut_at(&self, at: usize) -> bool {
        self.map.as_ref().is_some_and(|m| m.cut_at(at))
    }

    /// Asks for the bytes up to `AHEAD` past `at`, a cache line at a time.
    #[inline(always)]
    fn ahead(&mut self, at: usize) {
        let bytes = self.map.as_deref().unwrap_or_default();
        let to = at.saturating_add(AHEAD).min(bytes.len());
        while self.asked < to {
            prefetch(bytes, self.asked);
            self.asked += 64;
        }
    }
}

/// Asks for the cache line of `buf` holding `at`, without waiting for it.
#[inline(always)]
pub(super) fn prefetch(buf: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = buf.get(at) {
        // SAFETY: a prefetch reads nothing the program sees and never faults; the address is
        // in `buf` anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(b).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}

impl<'a, R: Read> Feed<'a, R> {
    const CHUNK: usize = 256 << 10;
    const MAX_RECORD: usize = 64 << 20;

    pub(super) fn new(r: R) -> Self {
        Self {
            r: Some(r),
            buf: vec![0; Self::CHUNK],
            mapped: &[],
            win: None,
            start: 0,
            end: 0,
            eof: false,
            record: 0,
            handover: None,
        }
    }

    /// A feed of `r` that reads into buffers of `chunk` bytes and hands each over when it is
    /// read to its end ([`Feed::retired`]): the frames in it stay where they are, for other
    /// threads to account, and the record cut by its end moves to the next buffer.
    pub(super) fn handing_over(r: R, chunk: usize) -> Self {
        Self {
            buf: vec![0; chunk],
            handover: Some(Handover {
                chunk,
                spare: None,
                retired: None,
            }),
            ..Self::new(r)
        }
    }

    /// A feed of the regular file `file` mapped `len` bytes at a time; `handing_over`: each
    /// window read to its end is handed over as [`Feed::handing_over`] hands its buffers.
    pub(super) fn windowed(file: File, len: usize, handing_over: bool) -> Feed<'a, File> {
        Feed {
            r: None,
            buf: Vec::new(),
            mapped: &[],
            win: Some(Window {
                file,
                map: None,
                base: 0,
                asked: 0,
                len: len.max(1),
            }),
            start: 0,
            end: 0,
            eof: false,
            record: 0,
            handover: handing_over.then_some(Handover {
                chunk: len,
                spare: None,
                retired: None,
            }),
        }
    }

    /// A buffer to read into once the current one is handed over (its contents do not matter).
    pub(super) fn give(&mut self, spare: Vec<u8>) {
        if let Some(h) = &mut self.handover {
            h.spare = Some(spare);
        }
    }

    /// The buffer handed over since the last call, if any: it holds every frame read before
    /// the record [`Feed::next`] consumed last (which lies in the current buffer).
    pub(super) fn retired(&mut self) -> Option<Chunk> {
        self.handover.as_mut()?.retired.take()
    }

    /// The current buffer, at the end of the input: it holds the frames read since the last
    /// handover.
    pub(super) fn take_buffer(&mut self) -> Chunk {
        self.start = 0;
        self.end = 0;
        match &mut self.win {
            Some(w) => w.map.take().map_or_else(Chunk::default, Chunk::Mapped),
            None => Chunk::Read(std::mem::take(&mut self.buf)),
        }
    }

    /// The size of the buffers a feed that hands them over reads into.
    pub(super) fn chunk(&self) -> usize {
        self.handover.as_ref().map_or(Self::CHUNK, |h| h.chunk)
    }

    /// Where the record [`Feed::next`] consumed last begins in the current buffer.
    #[inline]
    pub(super) fn record_at(&self) -> usize {
        self.record
    }

    pub(super) fn mapped(data: &'a [u8]) -> Self {
        Self {
            r: None,
            buf: Vec::new(),
            mapped: data,
            win: None,
            start: 0,
            end: data.len(),
            eof: true,
            record: 0,
            handover: None,
        }
    }

    /// Every byte of the current buffer, window or input in memory.
    #[inline(always)]
    fn all(&self) -> &[u8] {
        if let Some(w) = &self.win {
            w.bytes()
        } else if self.r.is_some() {
            &self.buf
        } else {
            self.mapped
        }
    }

    /// Maps the next window of the file: from the first byte not consumed, the window's length
    /// (twice what is left of a record that does not fit), up to the file's size now. The
    /// window read to its end is handed over, or unmapped.
    fn remap(&mut self) -> io::Result<()> {
        let Some(w) = &mut self.win else {
            return Ok(());
        };
        let from = w.base + self.start as u64;
        let have = w.base + self.end as u64;
        // A file growing while read is read on, as a stream would be; one cut shorter than
        // what is mapped ends there.
        let size = w.file.metadata()?.len();
        if size <= have {
            self.eof = true;
            return Ok(());
        }
        let tail = self.end - self.start;
        let want = w
            .len
            .max(tail.saturating_mul(2))
            .min(Self::MAX_RECORD + w.len);
        let len = usize::try_from(size - from).map_or(want, |left| left.min(want));
        let map = Guarded::new(&w.file, from, len)?;
        let len = map.len();
        let old = w.map.replace(map);
        w.base = from;
        w.asked = 0;
        // A window from which a record was consumed holds frames: it is handed over (the
        // first one only, as for buffers read into).
        if self.start > 0
            && let Some(h) = &mut self.handover
            && h.retired.is_none()
        {
            h.retired = old.map(Chunk::Mapped);
        }
        self.start = 0;
        self.end = len;
        Ok(())
    }

    #[inline]
    fn window(&self) -> &[u8] {
        &self.all()[self.start..self.end]
    }

    /// At most `n` first bytes (fewer only at the end of the input).
    pub(super) fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.end - self.start < n && !self.eof {
            self.fill()?;
        }
        let w = self.window();
        Ok(&w[..w.len().min(n)])
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.win.is_some() {
            return self.remap();
        }
        let Some(r) = self.r.as_mut() else {
            self.eof = true;
            return Ok(());
        };
        if self.start > 0
            && let Some(h) = &mut self.handover
        {
            // The record cut by the end of the buffer goes to the next one; this one is handed
            // over with the frames before it.
            let tail = self.end - self.start;
            let mut next = h.spare.take().unwrap_or_default();
            let want = h.chunk.max(tail.saturating_mul(2));
            if next.len() < want {
                next.resize(want, 0);
            }
            next[..tail].copy_from_slice(&self.buf[self.start..self.end]);
            let old = std::mem::replace(&mut self.buf, next);
            // A second handover before a frame was read again (pcapng blocks that are no
            // frames) gives up a buffer no frame lies in: the first is the one to hand over.
            if h.retired.is_none() {
                h.retired = Some(Chunk::Read(old));
            }
            self.end = tail;
            self.start = 0;
        } else if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(Self::MAX_RECORD + Self::CHUNK);
            self.buf.resize(grown, 0);
        }
        loop {
            match r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// `len` bytes at `at` in the record consumed last (empty if out of it: a parser can only
    /// point into the bytes it was given).
    #[inline]
    pub(super) fn consumed(&self, at: usize, len: usize) -> &[u8] {
        let all = self.all();
        let from = self.record.saturating_add(at);
        all.get(from..from.saturating_add(len)).unwrap_or_default()
    }

    /// Runs `step` on the available bytes until it consumes some (their count) or the input
    /// ends cleanly (0).
    #[inline(always)]
    pub(super) fn next(&mut self, mut step: impl FnMut(&[u8]) -> Step) -> Result<usize, FeedError> {
        loop {
            match step(self.window()) {
                Step::Used(n) => {
                    self.record = self.start;
                    self.start += n;
                    if let Some(w) = &mut self.win {
                        w.ahead(self.start);
                        if w.cut_at(self.start.saturating_sub(1)) {
                            return Err(FeedError::Shrunk);
                        }
                    }
                    return Ok(n);
                }
                Step::Fail(e) => return Err(FeedError::Parse(e)),
                Step::More if self.end - self.start > Self::MAX_RECORD => {
                    return Err(FeedError::TooLong);
                }
                Step::More if self.eof => {
                    return if self.start == self.end {
                        Ok(0)
                    } else {
                        Err(FeedError::Cut)
                    };
                }
                Step::More => self.fill().map_err(FeedError::Io)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pcap_file::{DataLink, Endianness, TsResolution};

    use super::super::tests::{demo, direct, ethernet, pcap, replay_bytes};
    use super::*;

    #[test]
    fn records_larger_than_the_read_chunk_and_corrupt_lengths() {
        let frames = demo();
        // A 300 KiB record (more than one read chunk) between two normal ones.
        let mut big = frames[..3].to_vec();
        big[1].bytes.resize(300 << 10, 0xAB);
        let bytes = pcap(
            &big,
            Endianness::Little,
            TsResolution::MicroSecond,
            DataLink::ETHERNET,
            ethernet,
        );
        let r = replay_bytes(&bytes).unwrap();
        assert_eq!(r.agg, direct(&big));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // A record header claiming 100 MB, followed by 80 MiB of data: a corrupt length, not a
        // cut file.
        let head = pcap(
            &frames[..1],
            Endianness::Little,
            TsResolution::MicroSecond,
            DataLink::ETHERNET,
            ethernet,
        );
        let mut record = [0u8; 16];
        record[8..12].copy_from_slice(&100_000_000u32.to_le_bytes());
        let input = (&head[..])
            .chain(&record[..])
            .chain(io::repeat(0).take(80 << 20));
        let mut all = Vec::new();
        let mut input = input;
        input.read_to_end(&mut all).unwrap();
        let r = replay_bytes(&all).unwrap();
        assert_eq!(r.agg.counters.frames, 1);
        assert_eq!(
            r.warnings,
            vec![format!(
                "test.pcap: frame 2 at byte {}: record length larger than any frame (over 64 MiB: corrupt record header); the 1 frames before it are reported",
                head.len()
            )]
        );
    }
}
