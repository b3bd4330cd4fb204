//! The input: [`Feed`] streams a reader through a buffer or walks bytes already in memory, and
//! hands the buffered bytes to a record parser one [`Step`] at a time.

use std::io::{self, Read};

use pcap_file::PcapError;

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
            Self::Parse(PcapError::InvalidField(what)) => format!("invalid field: {what}"),
            Self::Parse(e) => e.to_string(),
        }
    }
}

/// The input: a reader streamed through a buffer small enough to stay in cache (grown only for
/// a record that does not fit), or bytes already in memory. Records are parsed
/// by pcap-file's slice parsers either way.
pub(super) struct Feed<'a, R> {
    r: Option<R>,
    buf: Vec<u8>,
    mapped: &'a [u8],
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
    retired: Option<Vec<u8>>,
}

impl<'a, R: Read> Feed<'a, R> {
    const CHUNK: usize = 256 << 10;
    const MAX_RECORD: usize = 64 << 20;

    pub(super) fn new(r: R) -> Self {
        Self {
            r: Some(r),
            buf: vec![0; Self::CHUNK],
            mapped: &[],
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

    /// A buffer to read into once the current one is handed over (its contents do not matter).
    pub(super) fn give(&mut self, spare: Vec<u8>) {
        if let Some(h) = &mut self.handover {
            h.spare = Some(spare);
        }
    }

    /// The buffer handed over since the last call, if any: it holds every frame read before
    /// the record [`Feed::next`] consumed last (which lies in the current buffer).
    pub(super) fn retired(&mut self) -> Option<Vec<u8>> {
        self.handover.as_mut()?.retired.take()
    }

    /// The current buffer, at the end of the input: it holds the frames read since the last
    /// handover.
    pub(super) fn take_buffer(&mut self) -> Vec<u8> {
        self.start = 0;
        self.end = 0;
        std::mem::take(&mut self.buf)
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
            start: 0,
            end: data.len(),
            eof: true,
            record: 0,
            handover: None,
        }
    }

    #[inline]
    fn window(&self) -> &[u8] {
        if self.r.is_some() {
            &self.buf[self.start..self.end]
        } else {
            &self.mapped[self.start..self.end]
        }
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
                h.retired = Some(old);
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
        let all = if self.r.is_some() {
            &self.buf[..]
        } else {
            self.mapped
        };
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
