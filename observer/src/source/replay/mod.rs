//! Offline replay of capture files (pcap and pcapng) through the same parser and the same
//! aggregation as live capture. Memory is constant in the file size: frames are streamed, only
//! the flow table grows.
//!
//! A file that cannot be used at all (bad magic, unsupported link type, cut inside its header)
//! is an error. A file that breaks part-way (a record cut by the end of the file, a corrupt
//! block) keeps what was read before the break and yields a warning naming the byte offset and
//! the frame number.
//!
//! [`Replay`] recognizes the container by its magic and hands each frame to the aggregate; the
//! parts live beside it: `feed` (the input, streamed or in memory, cut into records by
//! pcap-file's slice parsers), `pcap` and `pcapng` (the records of each container), `link` (how
//! frames of a link type reach the parser) and `progress` (the progress line on a terminal).

use std::{
    fs::File,
    io::{self, Read},
};

use pcap_file::PcapError;

use crate::aggregate::{Aggregate, FlowMap};
use observer_common::FlowKey;

mod feed;
mod link;
mod pcap;
mod pcapng;
mod progress;

use feed::{Feed, FeedError, Step};
use link::Link;
use progress::Progress;

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

/// What watches the frames as they are read, beside the aggregate (the pipeline's time series
/// and microbursts): told when a file begins and of each frame before it is accounted.
pub trait FrameObserver {
    /// A capture file named `name` begins; `flows` is the flow table so far.
    fn begin_source(&mut self, name: &str, flows: &FlowMap);
    /// A frame of `len` bytes on the wire at `ts_ns`; `flows` is the flow table before it.
    fn frame(&mut self, ts_ns: u64, len: u64, flows: &FlowMap);
}

/// No observer: the counts alone.
impl FrameObserver for () {
    fn begin_source(&mut self, _: &str, _: &FlowMap) {}
    fn frame(&mut self, _: u64, _: u64, _: &FlowMap) {}
}

/// Everything replayed so far, over one or more files, and the observer of its frames.
#[derive(Debug, Default)]
pub struct Replay<O = ()> {
    pub agg: Aggregate,
    pub files: Vec<String>,
    /// Earliest and latest capture timestamps (Unix-epoch ns) of any frame.
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// Frames of pcapng interfaces whose link type is not supported (counted in `frames`).
    pub unsupported_link_frames: u64,
    /// Non-fatal problems: part-way breaks, unsupported pcapng interfaces.
    pub warnings: Vec<String>,
    /// Told of every frame ([`Replay::observed`]).
    pub observer: O,
    /// A file has begun and its first frame is still to come: the latest timestamp before it.
    file_began: Option<u64>,
    /// The flows seen before a file that overlaps the earlier ones in time: if it holds one of
    /// them, it is another observation point of the same flows (said once, then dropped).
    overlapped: Option<std::collections::HashSet<FlowKey>>,
}

/// The name under which frames of unsupported pcapng interfaces appear in `totals.skipped`.
pub const UNSUPPORTED_LINK_TYPE: &str = "unsupported_link_type";

impl Replay {
    /// A replay that counts, with no observer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<O: FrameObserver> Replay<O> {
    /// A replay whose frames `observer` also sees.
    pub fn observed(observer: O) -> Self {
        Self {
            agg: Aggregate::default(),
            files: Vec::new(),
            first_ts_ns: None,
            last_ts_ns: None,
            unsupported_link_frames: 0,
            warnings: Vec::new(),
            observer,
            file_began: None,
            overlapped: None,
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
        self.overlapped = None;
        self.observer.begin_source(name, &self.agg.flows);
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
                s.seq_track = Default::default();
            }
            self.overlapped = Some(self.agg.flows.keys().copied().collect());
        }
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ts_ns = Some(self.last_ts_ns.map_or(ts_ns, |t| t.max(ts_ns)));
        let len = orig_len.max(data.len() as u32);
        self.observer.frame(ts_ns, u64::from(len), &self.agg.flows);
        let parsed = self.agg.push_parsed(link.parse(data), data, ts_ns);
        if let (Some(before), Ok(p)) = (&self.overlapped, &parsed)
            && before.contains(&FlowKey::of(p))
        {
            self.overlapped = None;
            if let Some(name) = self.files.last() {
                self.warnings.push(format!(
                    "{name} overlaps the files before it in time and holds some of their flows: read as another observation point of them (their counts add up; the PSN analysis starts afresh in it)"
                ));
            }
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pcap_file::{
        DataLink, Endianness, TsResolution,
        pcap::{PcapHeader, PcapPacket, PcapWriter},
    };

    use super::*;
    use crate::source::synth::{self, Frame};

    pub(super) fn demo() -> Vec<Frame> {
        synth::scenario("demo").unwrap().frames
    }

    /// The aggregate of the frames read straight from memory: what every container and link
    /// type must reproduce.
    pub(super) fn direct(frames: &[Frame]) -> Aggregate {
        let mut agg = Aggregate::new();
        for f in frames {
            let _ = agg.push(&f.bytes, f.ts_ns);
        }
        agg
    }

    /// Replays through the streaming reader and from memory: both must give the same result.
    pub(super) fn replay_bytes(bytes: &[u8]) -> Result<Replay, ReplayError> {
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

    pub(super) fn pcap(
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

    pub(super) fn ethernet(f: &[u8]) -> Vec<u8> {
        f.to_vec()
    }

    /// Linux cooked v1: packet type, ARPHRD, address length, 8 address bytes, protocol.
    pub(super) fn sll(f: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, 0, 6];
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[12..]);
        v
    }

    /// Linux cooked v2: protocol, reserved, ifindex, ARPHRD, packet type, address length, address.
    pub(super) fn sll2(f: &[u8]) -> Vec<u8> {
        let mut v = f[12..14].to_vec();
        v.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6]);
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[14..]);
        v
    }

    pub(super) fn raw_ip(f: &[u8]) -> Vec<u8> {
        f[14..].to_vec()
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
