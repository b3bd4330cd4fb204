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
        }
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
        if self.start > 0 {
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
