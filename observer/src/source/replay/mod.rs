//! Offline replay of capture files (pcap and pcapng) through the same parser and the same
//! aggregation as live capture. Memory is constant in the file size: frames are streamed, only
//! the flow table grows.
//!
//! A file that cannot be used at all (bad magic, unsupported link type, cut inside its header)
//! is an error. A file that breaks part-way (a record cut by the end of the file, a corrupt
//! block) keeps what was read before the break and yields a warning naming the byte offset and
//! the frame number.

use std::{
    fs::File,
    io::{self, IsTerminal, Read},
    time::{Duration, Instant},
};

use observer_common::{Parsed, SkipReason, parse_frame, parse_frame_from, wire};
use pcap_file::{
    DataLink, Endianness, PcapError, TsResolution,
    pcap::PcapParser,
    pcapng::{
        Block, PcapNgParser,
        blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
    },
};

use crate::aggregate::Aggregate;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: io::Error },
    #[error("{file}: empty file")]
    Empty { file: String },
    #[error("{file}: not a pcap or pcapng file (magic {magic} at byte 0)")]
    BadMagic { file: String, magic: String },
    #[error("{file}: unsupported link type {name} ({number})")]
    UnsupportedLinkType {
        file: String,
        name: String,
        number: u32,
    },
    #[error("{file}: unusable header: {detail}")]
    Header { file: String, detail: String },
}

/// How frames of a link type reach the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Ethernet,
    /// Linux cooked capture v1: 16-byte header, protocol at byte 14.
    Sll,
    /// Linux cooked capture v2: 20-byte header, protocol at byte 0.
    Sll2,
    /// Raw IP: version nibble tells IPv4 or IPv6.
    RawIp,
    Ipv4,
    Ipv6,
}

impl Link {
    fn of(dl: DataLink) -> Result<Self, (String, u32)> {
        let number: u32 = dl.into();
        Ok(match number {
            1 => Self::Ethernet,
            113 => Self::Sll,
            276 => Self::Sll2,
            // LINKTYPE_RAW, and the DLT_RAW values some systems write.
            101 | 12 | 14 => Self::RawIp,
            228 => Self::Ipv4,
            229 => Self::Ipv6,
            _ => return Err((format!("{dl:?}"), number)),
        })
    }

    #[inline]
    fn parse(self, f: &[u8]) -> Parsed {
        let skip = |reason| Parsed {
            result: Err(reason),
            mirror: None,
            pause_at: observer_common::parse::NO_PAUSE,
        };
        let be16 = |at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        match self {
            Self::Ethernet => parse_frame(f),
            // MAC control behind a cooked header: counted, not itemized (no Ethernet header).
            Self::Sll => match be16(14) {
                Some(wire::ETHERTYPE_MAC_CONTROL) => skip(SkipReason::MacControl),
                Some(et) => parse_frame_from(f, et, 16),
                None => skip(SkipReason::Truncated),
            },
            Self::Sll2 => match be16(0) {
                Some(wire::ETHERTYPE_MAC_CONTROL) => skip(SkipReason::MacControl),
                Some(et) => parse_frame_from(f, et, 20),
                None => skip(SkipReason::Truncated),
            },
            Self::RawIp => match f.first().map(|b| b >> 4) {
                None => skip(SkipReason::Truncated),
                Some(4) => parse_frame_from(f, wire::ETHERTYPE_IPV4, 0),
                Some(6) => parse_frame_from(f, wire::ETHERTYPE_IPV6, 0),
                Some(_) => skip(SkipReason::NotIp),
            },
            Self::Ipv4 => parse_frame_from(f, wire::ETHERTYPE_IPV4, 0),
            Self::Ipv6 => parse_frame_from(f, wire::ETHERTYPE_IPV6, 0),
        }
    }
}

/// Everything replayed so far, over one or more files.
#[derive(Debug, Default)]
pub struct Replay {
    pub agg: Aggregate,
    pub files: Vec<String>,
    /// Earliest and latest capture timestamps (Unix-epoch ns) of any frame.
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// Frames of pcapng interfaces whose link type is not supported (counted in `frames`).
    pub unsupported_link_frames: u64,
    /// Non-fatal problems: part-way breaks, unsupported pcapng interfaces.
    pub warnings: Vec<String>,
    /// Time series and microbursts, when asked for ([`Replay::with_timeline`]).
    pub timeline: Option<crate::analysis::series::Timeline>,
    /// A file has begun and its first frame is still to come: the latest timestamp before it.
    file_began: Option<u64>,
}

/// The name under which frames of unsupported pcapng interfaces appear in `totals.skipped`.
pub const UNSUPPORTED_LINK_TYPE: &str = "unsupported_link_type";

impl Replay {
    pub fn new() -> Self {
        Self::default()
    }

    /// A replay that also builds the time series and microburst slots.
    pub fn with_timeline(config: crate::analysis::series::TimelineConfig) -> Self {
        Self {
            timeline: Some(crate::analysis::series::Timeline::new(config)),
            ..Self::default()
        }
    }

    /// Capture time spanned, in seconds (0 for fewer than two distinct timestamps).
    pub fn window_seconds(&self) -> f64 {
        match (self.first_ts_ns, self.last_ts_ns) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
            _ => 0.0,
        }
    }

    /// Replays the file at `path` (`-` is standard input).
    pub fn file(&mut self, path: &str, progress: bool) -> Result<(), ReplayError> {
        // (Memory-mapping was measured slower than streaming through a cached buffer here:
        // page faults cost more than the copy.)
        if path == "-" {
            return self.reader(path, io::stdin().lock(), None, progress);
        }
        let f = File::open(path).map_err(|error| ReplayError::Io {
            file: path.to_string(),
            error,
        })?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        self.reader(path, f, size, progress)
    }

    /// Replays a capture read from `r`, named `name` in messages.
    pub fn reader<R: Read>(
        &mut self,
        name: &str,
        r: R,
        size: Option<u64>,
        progress: bool,
    ) -> Result<(), ReplayError> {
        self.run(name, Feed::new(r), size, progress)
    }

    /// Replays a capture held in memory (no copy), named `name` in messages.
    pub fn bytes(&mut self, name: &str, data: &[u8], progress: bool) -> Result<(), ReplayError> {
        self.run(
            name,
            Feed::<io::Empty>::mapped(data),
            Some(data.len() as u64),
            progress,
        )
    }

    fn run<R: Read>(
        &mut self,
        name: &str,
        mut feed: Feed<'_, R>,
        size: Option<u64>,
        progress: bool,
    ) -> Result<(), ReplayError> {
        let head = feed.peek(4).map_err(|error| ReplayError::Io {
            file: name.to_string(),
            error,
        })?;
        if head.is_empty() {
            return Err(ReplayError::Empty {
                file: name.to_string(),
            });
        }
        let magic = head
            .get(..4)
            .map(|m| u32::from_be_bytes([m[0], m[1], m[2], m[3]]));
        let magic_text = head
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        self.files.push(name.to_string());
        self.file_began = self.last_ts_ns;
        if let Some(t) = &mut self.timeline {
            t.begin_source(name, &self.agg.flows);
        }
        let mut ctx = Ctx {
            name,
            unknown_interfaces: Vec::new(),
            frame: 0,
            offset: 0,
            progress: Progress::new(name, size, progress),
        };
        let result = match magic {
            Some(0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1) => {
                self.pcap(feed, &mut ctx)
            }
            Some(0x0A0D_0D0A) => self.pcapng(feed, &mut ctx),
            _ => Err(ReplayError::BadMagic {
                file: name.to_string(),
                magic: magic_text,
            }),
        };
        ctx.progress.finish();
        result
    }

    /// One frame: `data` as captured, `orig_len` its length on the wire before any snaplen.
    #[inline]
    fn frame(&mut self, link: Link, data: &[u8], orig_len: u32, ts_ns: u64) {
        if let Some(last) = self.file_began.take()
            && ts_ns < last
        {
            // This file overlaps the ones before it in time: another observation point of the
            // same flows, not their continuation (a rotated capture starts after the last
            // one). PSN continuity starts afresh, else the first request of each flow seen
            // again would count as a retransmission.
            for s in self.agg.flows.values_mut() {
                s.psn_valid = 0;
            }
        }
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ts_ns = Some(self.last_ts_ns.map_or(ts_ns, |t| t.max(ts_ns)));
        if let Some(t) = &mut self.timeline {
            let len = orig_len.max(data.len() as u32);
            t.frame(ts_ns, u64::from(len), &self.agg.flows);
        }
        let _ = self.agg.push_parsed(link.parse(data), data, ts_ns);
    }

    fn broken(&mut self, ctx: &Ctx, what: &str) {
        self.warnings.push(format!(
            "{}: frame {} at byte {}: {what}; the {} frames before it are reported",
            ctx.name,
            ctx.frame + 1,
            ctx.offset,
            ctx.frame
        ));
    }

    /// The file header through the crate's parser; what it consumed.
    fn header<R: Read, P>(
        feed: &mut Feed<'_, R>,
        name: &str,
        parse: impl Fn(&[u8]) -> Result<(&[u8], P), PcapError>,
    ) -> Result<(P, u64), ReplayError> {
        let mut out = None;
        let fed = feed.next(|buf| match parse(buf) {
            Ok((rest, p)) => {
                let used = buf.len() - rest.len();
                out = Some(p);
                Step::Used(used)
            }
            Err(PcapError::IncompleteBuffer) => Step::More,
            Err(e) => Step::Fail(e),
        });
        match (fed, out) {
            (Ok(used), Some(p)) => Ok((p, used as u64)),
            (Err(FeedError::Io(error)), _) => Err(ReplayError::Io {
                file: name.to_string(),
                error,
            }),
            (Err(e), _) => Err(ReplayError::Header {
                file: name.to_string(),
                detail: e.describe(),
            }),
            (Ok(_), None) => unreachable!("a used step sets the parser"),
        }
    }

    fn pcap<R: Read>(&mut self, mut feed: Feed<'_, R>, ctx: &mut Ctx) -> Result<(), ReplayError> {
        let (parser, used) = Self::header(&mut feed, ctx.name, PcapParser::new)?;
        let header = parser.header();
        let link = Link::of(header.datalink).map_err(|(name, number)| {
            ReplayError::UnsupportedLinkType {
                file: ctx.name.to_string(),
                name,
                number,
            }
        })?;
        let frac_ns: u64 = match header.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        };
        ctx.offset = used;
        loop {
            let fed = feed.next(|buf| match parser.next_raw_packet(buf) {
                Ok((rest, raw)) => {
                    let ts = raw.ts_sec as u64 * 1_000_000_000 + raw.ts_frac as u64 * frac_ns;
                    self.frame(link, &raw.data, raw.orig_len, ts);
                    Step::Used(buf.len() - rest.len())
                }
                Err(PcapError::IncompleteBuffer) => Step::More,
                Err(e) => Step::Fail(e),
            });
            match fed {
                Ok(0) => return Ok(()),
                Ok(used) => ctx.advance(used as u64),
                Err(e) => {
                    self.broken(ctx, &e.describe());
                    return Ok(());
                }
            }
        }
    }

    fn pcapng<R: Read>(&mut self, mut feed: Feed<'_, R>, ctx: &mut Ctx) -> Result<(), ReplayError> {
        let (mut parser, used) = Self::header(&mut feed, ctx.name, PcapNgParser::new)?;
        ctx.offset = used;
        let mut interfaces: Vec<Interface> = Vec::new();
        let mut last_ts = 0u64;
        loop {
            let mut block_err = None;
            let fed = feed.next(|buf| {
                let (rest, raw) = match parser.next_raw_block(buf) {
                    Ok(ok) => ok,
                    Err(PcapError::IncompleteBuffer) => return Step::More,
                    Err(e) => return Step::Fail(e),
                };
                let used = buf.len() - rest.len();
                let block = match parser.section().endianness {
                    Endianness::Big => raw.try_into_block::<byteorder_slice::BigEndian>(),
                    Endianness::Little => raw.try_into_block::<byteorder_slice::LittleEndian>(),
                };
                match block {
                    Ok(block) => {
                        self.block(ctx, block, &mut interfaces, &mut last_ts);
                        Step::Used(used)
                    }
                    Err(e) => {
                        block_err = Some(e);
                        Step::Used(used)
                    }
                }
            });
            if let Some(e) = block_err {
                self.broken(ctx, &FeedError::Parse(e).describe());
                return Ok(());
            }
            match fed {
                Ok(0) => return Ok(()),
                Ok(used) => {
                    ctx.offset += used as u64;
                    ctx.progress.tick(ctx.offset, ctx.frame);
                }
                Err(e) => {
                    self.broken(ctx, &e.describe());
                    return Ok(());
                }
            }
        }
    }

    fn block(
        &mut self,
        ctx: &mut Ctx,
        block: Block,
        interfaces: &mut Vec<Interface>,
        last_ts: &mut u64,
    ) {
        match block {
            Block::SectionHeader(_) => interfaces.clear(),
            Block::InterfaceDescription(idb) => {
                let iface = Interface::of(&idb);
                if let Err((name, number)) = &iface.link {
                    self.warnings.push(format!(
                        "{}: interface {} has unsupported link type {name} ({number}); its frames are counted as {UNSUPPORTED_LINK_TYPE}",
                        ctx.name,
                        interfaces.len()
                    ));
                }
                interfaces.push(iface);
            }
            Block::EnhancedPacket(epb) => {
                if let Some(i) = interfaces.get(epb.interface_id as usize) {
                    *last_ts = i.ns(epb.timestamp.as_nanos() as u64);
                }
                self.packet(
                    ctx,
                    interfaces,
                    epb.interface_id,
                    (&epb.data, epb.original_len),
                    *last_ts,
                );
            }
            Block::SimplePacket(spb) => {
                self.packet(ctx, interfaces, 0, (&spb.data, spb.original_len), *last_ts)
            }
            Block::Packet(pb) => {
                if let Some(i) = interfaces.get(pb.interface_id as usize) {
                    *last_ts = i.ns(pb.timestamp);
                }
                self.packet(
                    ctx,
                    interfaces,
                    u32::from(pb.interface_id),
                    (&pb.data, pb.original_len),
                    *last_ts,
                );
            }
            _ => {}
        }
    }

    fn packet(
        &mut self,
        ctx: &mut Ctx,
        interfaces: &[Interface],
        id: u32,
        (data, orig_len): (&[u8], u32),
        ts: u64,
    ) {
        ctx.frame += 1;
        match interfaces.get(id as usize).map(|i| &i.link) {
            Some(Ok(link)) => self.frame(*link, data, orig_len, ts),
            // Unsupported link type, or no such interface.
            other => {
                if other.is_none() && !ctx.unknown_interfaces.contains(&id) {
                    ctx.unknown_interfaces.push(id);
                    self.warnings.push(format!(
                        "{}: frame {} at byte {}: interface {id} was never described; its frames are counted as {UNSUPPORTED_LINK_TYPE}",
                        ctx.name, ctx.frame, ctx.offset
                    ));
                }
                self.agg.counters.frames += 1;
                self.unsupported_link_frames += 1;
            }
        }
    }
}

/// pcapng timestamps: the raw count in units of the interface's if_tsresol (default 10^-6 s),
/// plus its if_tsoffset in seconds.
struct Interface {
    link: Result<Link, (String, u32)>,
    /// Timestamp units per second.
    units_per_sec: u64,
    offset_ns: u64,
}

impl Interface {
    fn of(idb: &InterfaceDescriptionBlock) -> Self {
        let mut units_per_sec = 1_000_000u64;
        let mut offset_ns = 0u64;
        for opt in &idb.options {
            if let InterfaceDescriptionOption::IfTsOffset(secs) = opt {
                offset_ns = secs.saturating_mul(1_000_000_000);
            }
            if let InterfaceDescriptionOption::IfTsResol(r) = opt {
                let exp = u32::from(r & 0x7F);
                units_per_sec = if r & 0x80 == 0 {
                    10u64.checked_pow(exp).unwrap_or(1_000_000_000)
                } else {
                    1u64.checked_shl(exp).unwrap_or(1_000_000_000)
                };
            }
        }
        Self {
            link: Link::of(idb.linktype),
            units_per_sec: units_per_sec.max(1),
            offset_ns,
        }
    }

    fn ns(&self, raw: u64) -> u64 {
        let ns = (raw as u128 * 1_000_000_000 / self.units_per_sec as u128).min(u64::MAX as u128);
        (ns as u64).saturating_add(self.offset_ns)
    }
}

struct Ctx<'a> {
    name: &'a str,
    /// pcapng interface IDs already warned about (no interface description).
    unknown_interfaces: Vec<u32>,
    /// Frames read so far.
    frame: u64,
    /// Byte offset of the next record.
    offset: u64,
    progress: Progress,
}

impl Ctx<'_> {
    #[inline]
    fn advance(&mut self, bytes: u64) {
        self.frame += 1;
        self.offset += bytes;
        if self.frame.is_multiple_of(65_536) {
            self.progress.tick(self.offset, self.frame);
        }
    }
}

/// What a step over the buffered bytes did.
enum Step {
    /// Consumed this many bytes.
    Used(usize),
    /// Needs more bytes than are buffered.
    More,
    Fail(PcapError),
}

enum FeedError {
    Io(io::Error),
    /// The input ended inside a record.
    Cut,
    /// A record longer than [`Feed::MAX_RECORD`]: a corrupt length field.
    TooLong,
    Parse(PcapError),
}

impl FeedError {
    fn describe(&self) -> String {
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
struct Feed<'a, R> {
    r: Option<R>,
    buf: Vec<u8>,
    mapped: &'a [u8],
    start: usize,
    end: usize,
    eof: bool,
}

impl<'a, R: Read> Feed<'a, R> {
    const CHUNK: usize = 256 << 10;
    const MAX_RECORD: usize = 64 << 20;

    fn new(r: R) -> Self {
        Self {
            r: Some(r),
            buf: vec![0; Self::CHUNK],
            mapped: &[],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    fn mapped(data: &'a [u8]) -> Self {
        Self {
            r: None,
            buf: Vec::new(),
            mapped: data,
            start: 0,
            end: data.len(),
            eof: true,
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
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
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

    /// Runs `step` on the available bytes until it consumes some (their count) or the input
    /// ends cleanly (0).
    #[inline]
    fn next(&mut self, mut step: impl FnMut(&[u8]) -> Step) -> Result<usize, FeedError> {
        loop {
            match step(self.window()) {
                Step::Used(n) => {
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

/// A progress line on stderr for large files, only when stderr is a terminal.
struct Progress {
    name: String,
    size: Option<u64>,
    on: bool,
    shown: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    const MIN_SIZE: u64 = 64 << 20;

    fn new(name: &str, size: Option<u64>, wanted: bool) -> Self {
        let big = size.is_none_or(|s| s >= Self::MIN_SIZE);
        let now = Instant::now();
        Self {
            name: name.to_string(),
            size,
            on: wanted && big && io::stderr().is_terminal(),
            shown: false,
            start: now,
            last: now,
        }
    }

    fn tick(&mut self, offset: u64, frames: u64) {
        if !self.on || self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let mb = offset as f64 / 1e6;
        let rate = frames as f64 / self.start.elapsed().as_secs_f64().max(1e-9) / 1e6;
        match self.size {
            Some(size) if size > 0 => eprint!(
                "\r\x1b[Kreplay: {} {:5.1}% ({mb:.0} of {:.0} MB, {frames} frames, {rate:.1} M frames/s)",
                self.name,
                offset as f64 * 100.0 / size as f64,
                size as f64 / 1e6
            ),
            _ => eprint!(
                "\r\x1b[Kreplay: {} {mb:.0} MB, {frames} frames, {rate:.1} M frames/s",
                self.name
            ),
        }
    }

    fn finish(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use pcap_file::{
        pcap::{PcapHeader, PcapPacket, PcapWriter},
        pcapng::{
            PcapNgWriter,
            blocks::{enhanced_packet::EnhancedPacketBlock, section_header::SectionHeaderBlock},
        },
    };

    use super::*;
    use crate::source::synth::{self, Frame};

    fn demo() -> Vec<Frame> {
        synth::scenario("demo").unwrap().frames
    }

    /// The aggregate of the frames read straight from memory: what every container and link
    /// type must reproduce.
    fn direct(frames: &[Frame]) -> Aggregate {
        let mut agg = Aggregate::new();
        for f in frames {
            let _ = agg.push(&f.bytes, f.ts_ns);
        }
        agg
    }

    /// Replays through the streaming reader and from memory: both must give the same result.
    fn replay_bytes(bytes: &[u8]) -> Result<Replay, ReplayError> {
        let mut streamed = Replay::new();
        let a = streamed.reader("test.pcap", bytes, Some(bytes.len() as u64), false);
        let mut mapped = Replay::new();
        let b = mapped.bytes("test.pcap", bytes, false);
        assert_eq!(
            a.as_ref().map_err(ToString::to_string),
            b.as_ref().map_err(ToString::to_string)
        );
        assert_eq!(streamed.agg, mapped.agg);
        assert_eq!(streamed.warnings, mapped.warnings);
        a.map(|()| streamed)
    }

    fn pcap(
        frames: &[Frame],
        endianness: Endianness,
        res: TsResolution,
        link: DataLink,
        map: impl Fn(&[u8]) -> Vec<u8>,
    ) -> Vec<u8> {
        let header = PcapHeader {
            endianness,
            ts_resolution: res,
            datalink: link,
            snaplen: 1 << 20,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
        for f in frames {
            let data = map(&f.bytes);
            let ts = Duration::from_nanos(f.ts_ns);
            w.write_packet(&PcapPacket::new(ts, data.len() as u32, &data))
                .unwrap();
        }
        w.into_writer()
    }

    fn ethernet(f: &[u8]) -> Vec<u8> {
        f.to_vec()
    }

    #[test]
    fn pcap_byte_orders_and_resolutions_equal_direct_parsing() {
        let frames = demo();
        let want = direct(&frames);
        for endianness in [Endianness::Little, Endianness::Big] {
            for res in [TsResolution::MicroSecond, TsResolution::NanoSecond] {
                let bytes = pcap(&frames, endianness, res, DataLink::ETHERNET, ethernet);
                let r = replay_bytes(&bytes).unwrap();
                assert_eq!(r.agg, want, "{endianness:?} {res:?}");
                assert!(r.warnings.is_empty(), "{:?}", r.warnings);
                assert_eq!(r.first_ts_ns, Some(frames[0].ts_ns));
                assert_eq!(r.last_ts_ns, Some(frames.last().unwrap().ts_ns));
            }
        }
    }

    /// Linux cooked v1: packet type, ARPHRD, address length, 8 address bytes, protocol.
    fn sll(f: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, 0, 6];
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[12..]);
        v
    }

    /// Linux cooked v2: protocol, reserved, ifindex, ARPHRD, packet type, address length, address.
    fn sll2(f: &[u8]) -> Vec<u8> {
        let mut v = f[12..14].to_vec();
        v.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6]);
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[14..]);
        v
    }

    fn raw_ip(f: &[u8]) -> Vec<u8> {
        f[14..].to_vec()
    }

    #[test]
    fn cooked_and_raw_link_types_equal_ethernet() {
        // Untagged frames only: cooked and raw captures carry no Ethernet VLAN header.
        let frames: Vec<Frame> = demo()
            .into_iter()
            .filter(|f| f.bytes[12..14] == [0x08, 0x00] || f.bytes[12..14] == [0x86, 0xDD])
            .collect();
        assert!(frames.len() > 100);
        let want = direct(&frames);
        let v4: Vec<Frame> = frames
            .iter()
            .filter(|f| f.bytes[12..14] == [0x08, 0x00])
            .cloned()
            .collect();
        type Case<'a> = (DataLink, fn(&[u8]) -> Vec<u8>, &'a [Frame], &'a Aggregate);
        let cases: [Case; 5] = [
            (DataLink::LINUX_SLL, sll, &frames, &want),
            (DataLink::LINUX_SLL2, sll2, &frames, &want),
            (DataLink::RAW, raw_ip, &frames, &want),
            (DataLink::IPV4, raw_ip, &v4, &direct(&v4)),
            (DataLink::ETHERNET, ethernet, &frames, &want),
        ];
        for (link, map, frames, want) in cases {
            let bytes = pcap(
                frames,
                Endianness::Little,
                TsResolution::NanoSecond,
                link,
                map,
            );
            assert_eq!(&replay_bytes(&bytes).unwrap().agg, want, "{link:?}");
        }
    }

    fn pcapng(interfaces: &[(DataLink, Option<u8>)], packets: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
        let mut w =
            PcapNgWriter::with_section_header(Vec::new(), SectionHeaderBlock::default()).unwrap();
        for (link, tsresol) in interfaces {
            let mut idb = InterfaceDescriptionBlock::new(*link, 65535);
            if let Some(r) = tsresol {
                idb.options.push(InterfaceDescriptionOption::IfTsResol(*r));
            }
            w.write_pcapng_block(idb).unwrap();
        }
        for (id, raw_ts, data) in packets {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: *id,
                // The writer stores the raw count; units come from the interface's if_tsresol.
                timestamp: Duration::from_nanos(*raw_ts),
                original_len: data.len() as u32,
                data: Cow::Borrowed(&data[..]),
                options: vec![],
            })
            .unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn pcapng_interfaces_with_their_link_types_and_timestamp_units() {
        let frames = demo();
        let want = direct(&frames);
        // Interface 0: Ethernet, default units (microseconds); 1: SLL2 in nanoseconds;
        // 2: raw IP in units of 2^-10 s; 3: an unsupported link type.
        let ifaces = [
            (DataLink::ETHERNET, None),
            (DataLink::LINUX_SLL2, Some(9)),
            (DataLink::RAW, Some(0x80 | 10)),
            (DataLink::ERF, None),
        ];
        let mut packets = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let (id, raw_ts, data) = match i % 3 {
                0 => (0, f.ts_ns / 1000, f.bytes.clone()),
                1 => (1, f.ts_ns, sll2(&f.bytes)),
                _ => (
                    2,
                    (f.ts_ns as u128 * 1024 / 1_000_000_000) as u64,
                    raw_ip(&f.bytes),
                ),
            };
            packets.push((id, raw_ts, data));
        }
        packets.push((3, 0, vec![0xEE; 64]));
        let mut bytes = pcapng(&ifaces, &packets);
        // An enhanced packet block on interface 9, which was never described (the writer
        // refuses to write one, so by hand, in the section's byte order, big-endian): type 6,
        // length, interface, time, lengths, data, length.
        let mut epb = Vec::new();
        for w in [6u32, 32 + 64, 9, 0, 0, 64, 64] {
            epb.extend_from_slice(&w.to_be_bytes());
        }
        epb.extend_from_slice(&[0xEE; 64]);
        epb.extend_from_slice(&(32u32 + 64).to_be_bytes());
        bytes.extend_from_slice(&epb);
        let r = replay_bytes(&bytes).unwrap();
        let mut want_counters = want.counters;
        want_counters.frames += 2;
        assert_eq!(r.agg.counters, want_counters);
        assert_eq!(
            r.agg.comparable(),
            Aggregate {
                counters: want_counters,
                ..want.comparable()
            }
        );
        assert_eq!(r.unsupported_link_frames, 2);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(
            r.warnings[1].contains("interface 9 was never described"),
            "{:?}",
            r.warnings
        );
        assert!(
            r.warnings[0].contains("interface 3 has unsupported link type ERF (197)"),
            "{:?}",
            r.warnings
        );
        // Timestamps converted from each interface's units (2^-10 s units are coarse).
        assert_eq!(r.first_ts_ns, Some(frames[0].ts_ns));
        let last = frames.last().unwrap().ts_ns;
        assert!(
            r.last_ts_ns.unwrap().abs_diff(last) < 1_000_000,
            "{:?} vs {last}",
            r.last_ts_ns
        );
    }

    #[test]
    fn pcapng_if_tsoffset_shifts_timestamps() {
        let frames = demo();
        let mut w =
            PcapNgWriter::with_section_header(Vec::new(), SectionHeaderBlock::default()).unwrap();
        let mut idb = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535);
        idb.options.push(InterfaceDescriptionOption::IfTsResol(9));
        idb.options
            .push(InterfaceDescriptionOption::IfTsOffset(1_000));
        w.write_pcapng_block(idb).unwrap();
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(5),
            original_len: frames[0].bytes.len() as u32,
            data: Cow::Borrowed(&frames[0].bytes[..]),
            options: vec![],
        })
        .unwrap();
        let r = replay_bytes(&w.into_inner()).unwrap();
        assert_eq!(r.first_ts_ns, Some(1_000_000_000_005));
    }

    #[test]
    fn a_record_cut_by_the_end_of_the_file_keeps_the_frames_before_it() {
        let frames = demo();
        let bytes = pcap(
            &frames,
            Endianness::Little,
            TsResolution::MicroSecond,
            DataLink::ETHERNET,
            ethernet,
        );
        let last_len = 16 + frames.last().unwrap().bytes.len();
        let cut = &bytes[..bytes.len() - 5];
        let r = replay_bytes(cut).unwrap();
        assert_eq!(r.agg, direct(&frames[..frames.len() - 1]));
        let offset = bytes.len() - last_len;
        assert_eq!(
            r.warnings,
            vec![format!(
                "test.pcap: frame {} at byte {offset}: cut short by the end of the file; the {} frames before it are reported",
                frames.len(),
                frames.len() - 1
            )]
        );
        // A record header announcing more bytes than the file holds: the same.
        let mut long = pcap(
            &frames[..3],
            Endianness::Little,
            TsResolution::MicroSecond,
            DataLink::ETHERNET,
            ethernet,
        );
        let third = 24 + 2 * 16 + frames[0].bytes.len() + frames[1].bytes.len();
        long[third + 8..third + 12].copy_from_slice(&60_000u32.to_le_bytes());
        let r = replay_bytes(&long).unwrap();
        assert_eq!(r.agg.counters.frames, 2);
        assert!(
            r.warnings[0].starts_with(&format!("test.pcap: frame 3 at byte {third}: ")),
            "{:?}",
            r.warnings
        );
    }

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

    #[test]
    fn a_snaplen_truncated_frame_counts_with_its_ip_length() {
        let frames = demo();
        let full = frames[0].bytes.clone();
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_packet(&PcapPacket::new(
            Duration::from_nanos(frames[0].ts_ns),
            full.len() as u32,
            &full[..60],
        ))
        .unwrap();
        let r = replay_bytes(&w.into_writer()).unwrap();
        assert_eq!(r.agg.counters.roce_packets, 1);
        assert_eq!(
            r.agg.counters.roce_bytes,
            u64::from(u16::from_be_bytes([full[16], full[17]]))
        );
    }

    #[test]
    fn unusable_files_are_errors_naming_the_file() {
        let msg = |b: &[u8]| replay_bytes(b).unwrap_err().to_string();
        assert_eq!(msg(b""), "test.pcap: empty file");
        assert_eq!(
            msg(b"GIF89a..."),
            "test.pcap: not a pcap or pcapng file (magic 47 49 46 38 at byte 0)"
        );
        assert_eq!(
            msg(&[0xD4, 0xC3, 0xB2, 0xA1, 2, 0]),
            "test.pcap: unusable header: cut short by the end of the file"
        );
        let erf = pcap(
            &[],
            Endianness::Little,
            TsResolution::MicroSecond,
            DataLink::ERF,
            ethernet,
        );
        assert_eq!(msg(&erf), "test.pcap: unsupported link type ERF (197)");
        let mut r = Replay::new();
        let e = r
            .file("/nonexistent/x.pcap", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/x.pcap: cannot read: "), "{e}");
    }

    #[test]
    fn several_files_add_up_and_span_one_window() {
        let frames = demo();
        let (a, b) = frames.split_at(frames.len() / 2);
        let mut r = Replay::new();
        for (name, part) in [("a", a), ("b", b)] {
            let bytes = pcap(
                part,
                Endianness::Little,
                TsResolution::NanoSecond,
                DataLink::ETHERNET,
                ethernet,
            );
            r.reader(name, &bytes[..], None, false).unwrap();
        }
        assert_eq!(r.agg, direct(&frames));
        assert_eq!(r.files, vec!["a".to_string(), "b".to_string()]);
        let span = frames.last().unwrap().ts_ns - frames[0].ts_ns;
        assert_eq!(r.window_seconds(), span as f64 / 1e9);
    }
}
