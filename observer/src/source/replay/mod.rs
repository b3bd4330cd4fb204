//! Offline replay of capture files (pcap and pcapng) through the same parser and the same
//! aggregation as live capture. Memory is constant in the file size: frames are streamed, only
//! the flow table grows.
//!
//! Several files are read as one stream, merged by capture time: each file is read a frame at a
//! time, and the earliest pending frame of any file goes next (on a tie, the file given first).
//! Rotated captures (one after the other in time) are so read in sequence, whatever the order
//! they are given in. Captures of the same traffic at several observation points (per-node
//! captures of one job, two taps) overlap in time and share flows: each packet counts once, at
//! the point that gave it first, and what the others saw of it is kept apart (`points`: how
//! many points saw it, the time from one to the other, where a missing one was seen last).
//!
//! A file that cannot be used at all (bad magic, unsupported link type, cut inside its header)
//! is an error, before any frame is read. A file that breaks part-way (a record cut by the end
//! of the file, a corrupt block) keeps what was read before the break and yields a warning
//! naming the byte offset and the frame number; the other files are read on.
//!
//! [`Replay`] recognizes the container by its magic, merges the files and hands each frame to
//! the aggregate; the parts live beside it: `feed` (the input, streamed or in memory, cut into
//! records by pcap-file's slice parsers), `pcap` and `pcapng` (the records of each container),
//! `link` (how frames of a link type reach the parser) and `progress` (the progress line on a
//! terminal).

use std::{
    fs::File,
    io::{self, Read},
};

use pcap_file::PcapError;

use crate::aggregate::Aggregate;
use observer_common::{FlowKey, Parsed, RocePacket, SkipReason};
use points::Points;

mod feed;
mod link;
mod overlap;
mod pcap;
mod pcapng;
mod reader;
/// The sightings of one traffic at several observation points (the core's).
pub use observer_core::aggregate::sightings as points;
mod progress;
mod shard;

use feed::{Feed, FeedError, Step};
/// How frames of a link type reach the parser: also live capture's (`source::capture`).
pub(crate) use link::Link;
use overlap::{COPY_LAG_NS, Overlap};
use progress::Progress;
use reader::{Container, Ctx, Pending, Reader, header, offset_in, open};
pub use shard::{ShardPart, Sharded};

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

/// What watches the frames as they are read, beside the aggregate (the core's).
pub use observer_core::aggregate::FrameObserver;

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
    /// Non-fatal problems: part-way breaks, unsupported pcapng interfaces, files that overlap.
    /// File by file, in the order given.
    pub warnings: Vec<String>,
    /// Told of every frame ([`Replay::observed`]).
    pub observer: O,
    /// Several files read merged: what each observation point saw of the others' packets.
    pub points: Option<Points>,
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
            points: None,
        }
    }

    /// Capture time spanned, in seconds (0 for fewer than two distinct timestamps).
    pub fn window_seconds(&self) -> f64 {
        match (self.first_ts_ns, self.last_ts_ns) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
            _ => 0.0,
        }
    }

    /// Replays the files at `paths` (`-` is standard input) as one stream merged by capture
    /// time. A file that cannot be used is an error before any frame is read.
    pub fn files<S: AsRef<str>>(&mut self, paths: &[S], progress: bool) -> Result<(), ReplayError> {
        if let [one] = paths {
            // One file needs no merge: read straight through, without boxing its input.
            return self.file(one.as_ref(), progress);
        }
        let mut readers = Vec::with_capacity(paths.len());
        for path in paths {
            let path = path.as_ref();
            let (input, size): (Box<dyn Read>, _) = if path == "-" {
                (Box::new(io::stdin().lock()), None)
            } else {
                let (f, size) = open(path)?;
                (Box::new(f), size)
            };
            readers.push(Reader::open(path, Feed::new(input), size, progress)?);
        }
        self.merge(readers);
        Ok(())
    }

    /// Replays the files at `paths` as [`Replay::files`] does; one file (not several: their
    /// merge stays on one thread) with its frames accounted by `shards` threads beside the one
    /// reading it, when that is more than one. The result is the same whatever the number.
    pub fn files_sharded<S: AsRef<str>>(
        &mut self,
        paths: &[S],
        progress: bool,
        shards: usize,
    ) -> Result<(), ReplayError>
    where
        O: Sharded,
    {
        match paths {
            [one] if shards > 1 => self.file_sharded(one.as_ref(), progress, shards, shard::CHUNK),
            _ => self.files(paths, progress),
        }
    }

    /// Replays the file at `path` (`-` is standard input) read in buffers of `chunk` bytes,
    /// its frames accounted by `shards` threads.
    pub(crate) fn file_sharded(
        &mut self,
        path: &str,
        progress: bool,
        shards: usize,
        chunk: usize,
    ) -> Result<(), ReplayError>
    where
        O: Sharded,
    {
        if path == "-" {
            let feed = Feed::handing_over(io::stdin().lock(), chunk);
            let reader = Reader::open(path, feed, None, progress)?;
            self.sharded(reader, shards);
            return Ok(());
        }
        let (f, size) = open(path)?;
        let reader = Reader::open(path, Feed::handing_over(f, chunk), size, progress)?;
        self.sharded(reader, shards);
        Ok(())
    }

    /// Replays the file at `path` (`-` is standard input). Files replayed by several calls are
    /// read one after the other: [`Replay::files`] merges them by time.
    pub fn file(&mut self, path: &str, progress: bool) -> Result<(), ReplayError> {
        if path == "-" {
            return self.reader(path, io::stdin().lock(), None, progress);
        }
        let (f, size) = open(path)?;
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
        let reader = Reader::open(name, Feed::new(r), size, progress)?;
        self.single(reader);
        Ok(())
    }

    /// Replays a capture held in memory (no copy), named `name` in messages.
    pub fn bytes(&mut self, name: &str, data: &[u8], progress: bool) -> Result<(), ReplayError> {
        let reader = Reader::open(
            name,
            Feed::<io::Empty>::mapped(data),
            Some(data.len() as u64),
            progress,
        )?;
        self.single(reader);
        Ok(())
    }

    /// Reads one file to its end.
    fn single<R: Read>(&mut self, mut r: Reader<'_, R>) {
        let source = self.begin(&r.ctx.name);
        // The container is matched once, not per frame.
        match &mut r.container {
            Container::Pcap(c) => {
                while let Some(f) = c.next(&mut r.feed, &mut r.ctx) {
                    let _ = self.frame(source, &f, r.feed.consumed(f.at, f.len));
                }
            }
            Container::PcapNg(c) => {
                while let Some(f) = c.next(&mut r.feed, &mut r.ctx) {
                    let _ = self.frame(source, &f, r.feed.consumed(f.at, f.len));
                }
            }
        }
        self.end(r);
    }

    /// Reads the files to their ends as one stream merged by capture time. A file holds one
    /// frame pending at a time: the earliest of them goes next, and its file goes on while it
    /// stays earlier than the others' (what rotated captures do all along).
    fn merge<R: Read>(&mut self, mut readers: Vec<Reader<'_, R>>) {
        let base = self.files.len();
        for r in &readers {
            self.begin(&r.ctx.name);
        }
        let n = readers.len();
        let mut pending: Vec<Option<Pending>> = readers.iter_mut().map(Reader::next).collect();
        // Each file's time span: from its first frame to its latest so far, and whether it has
        // ended.
        let first_ts: Vec<Option<u64>> = pending.iter().map(|p| p.map(|f| f.ts_ns)).collect();
        let mut latest: Vec<Option<u64>> = vec![None; n];
        let mut ended: Vec<bool> = pending.iter().map(Option::is_none).collect();
        let mut overlap = Overlap::new(n);
        let mut points = Points::new(readers.iter().map(|r| r.ctx.name.clone()).collect());
        if n > points::MAX_POINTS {
            self.warnings.push(format!(
                "{n} files: only the first {} are matched against each other as observation points (a packet a later file shares with another counts again)",
                points::MAX_POINTS
            ));
        }
        loop {
            // The earliest pending frame and the next earliest, ordered by (time, file).
            let mut first: Option<(u64, usize)> = None;
            let mut second: Option<(u64, usize)> = None;
            for (i, p) in pending.iter().enumerate() {
                let Some(p) = p else { continue };
                let k = (p.ts_ns, i);
                if first.is_none_or(|f| k < f) {
                    second = first;
                    first = Some(k);
                } else if second.is_none_or(|s| k < s) {
                    second = Some(k);
                }
            }
            let Some((_, i)) = first else { break };
            let bound = second.unwrap_or((u64::MAX, usize::MAX));
            // Another file has begun and not ended: this one overlaps it in time. (The others
            // stand still while this one goes on, so that holds for the whole run.)
            let live = (0..n.min(points::MAX_POINTS))
                .filter(|&j| j != i && !ended[j] && latest[j].is_some())
                .fold(0u64, |m, j| m | 1 << j);
            let overlapping = (0..n).any(|j| j != i && !ended[j] && latest[j].is_some());
            let mut next = pending[i].take();
            while let Some(f) = next {
                if (f.ts_ns, i) > bound {
                    next = Some(f);
                    break;
                }
                latest[i] = Some(latest[i].map_or(f.ts_ns, |t| t.max(f.ts_ns)));
                // Within a copy's lag of another file's span, a packet may be a copy of one of
                // its packets.
                let near = (0..n).any(|j| {
                    j != i
                        && first_ts[j].is_some_and(|t| t <= f.ts_ns.saturating_add(COPY_LAG_NS))
                        && (!ended[j]
                            || latest[j].is_some_and(|t| f.ts_ns <= t.saturating_add(COPY_LAG_NS)))
                });
                let data = readers[i].data(&f);
                // Parsed once: for the point's own view (its latency, in its own clock) and
                // for the merged accounting.
                let parsed = f.link.parse(data);
                if let Some(view) = points.views.get_mut(i) {
                    let _ = view.push_parsed(parsed, data, f.ts_ns);
                }
                if near {
                    let named = self.frame_near(
                        base + i,
                        i,
                        &f,
                        data,
                        parsed,
                        overlapping,
                        live,
                        &mut overlap,
                        &mut points,
                    );
                    if let Some(k) = named
                        && let Some(r) = readers.get_mut(k)
                    {
                        r.ctx.warnings.push(format!(
                            "{} overlaps the files before it in time and holds some of their flows: read as another observation point of the same traffic (a packet seen at several points within {} ms counts once: see `points`)",
                            r.ctx.name,
                            points::SIGHT_WINDOW_NS / 1_000_000
                        ));
                    }
                } else {
                    self.observe(base + i, &f, data);
                    let _ = self.agg.push_parsed(parsed, data, f.ts_ns);
                }
                next = readers[i].next();
            }
            ended[i] = next.is_none();
            pending[i] = next;
        }
        points.finish();
        if points.shared() {
            self.agg.latency = points.latency();
            self.agg.latency_scopes.clear();
            self.points = Some(points);
        }
        for r in readers {
            self.end(r);
        }
    }

    /// A file begins: its source number.
    fn begin(&mut self, name: &str) -> usize {
        self.files.push(name.to_string());
        self.observer.begin_source(name);
        self.files.len() - 1
    }

    /// A file has ended: what it counted beside the frames, and its warnings.
    fn end<R: Read>(&mut self, mut r: Reader<'_, R>) {
        r.ctx.progress.finish();
        self.agg.counters.frames += r.ctx.unsupported;
        self.unsupported_link_frames += r.ctx.unsupported;
        self.warnings.append(&mut r.ctx.warnings);
    }

    /// One frame of `source`: `data` as captured.
    #[inline(always)]
    fn frame(&mut self, source: usize, f: &Pending, data: &[u8]) -> Result<RocePacket, SkipReason> {
        self.observe(source, f, data);
        self.agg.push_parsed(f.link.parse(data), data, f.ts_ns)
    }

    /// The time span and the observer see a frame of `source` before it is accounted.
    #[inline(always)]
    fn observe(&mut self, source: usize, f: &Pending, data: &[u8]) {
        self.span(f.ts_ns);
        // On the wire before any snaplen.
        let len = f.orig_len.max(data.len() as u32);
        self.observer
            .frame(source, f.ts_ns, u64::from(len), &self.agg);
    }

    /// The time span takes in a frame at `ts_ns`.
    #[inline(always)]
    fn span(&mut self, ts_ns: u64) {
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ts_ns = Some(self.last_ts_ns.map_or(ts_ns, |t| t.max(ts_ns)));
    }

    /// One frame of `file` (`source`), `parsed`, near another file's span in time: a packet another
    /// point gave already is a sighting of it, not counted again ([`Points::sight`]). While
    /// `overlapping`, the file it names for holding another's flows, the first time.
    #[allow(clippy::too_many_arguments)]
    fn frame_near(
        &mut self,
        source: usize,
        file: usize,
        f: &Pending,
        data: &[u8],
        parsed: Parsed,
        overlapping: bool,
        live: u64,
        overlap: &mut Overlap,
        points: &mut Points,
    ) -> Option<usize> {
        self.observe(source, f, data);
        let (seen, named) = match &parsed.result {
            Ok(p) => {
                let named = if overlapping {
                    overlap.carried(file, FlowKey::of(p))
                } else {
                    None
                };
                (points.sight(file, p, f.ts_ns, live), named)
            }
            Err(_) => (false, None),
        };
        if !seen {
            let _ = self.agg.push_parsed(parsed, data, f.ts_ns);
        }
        named
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

    /// Merges captures held in memory, as [`Replay::files`] merges files.
    fn merged<O: FrameObserver>(r: &mut Replay<O>, files: &[(&str, &[u8])]) {
        let readers = files
            .iter()
            .map(|(name, bytes)| {
                Reader::open(name, Feed::<io::Empty>::mapped(bytes), None, false).unwrap()
            })
            .collect();
        r.merge(readers);
    }

    fn pcap_ns(frames: &[Frame]) -> Vec<u8> {
        pcap(
            frames,
            Endianness::Little,
            TsResolution::NanoSecond,
            DataLink::ETHERNET,
            ethernet,
        )
    }

    /// Which file each frame came from, in the order the frames were accounted.
    #[derive(Default)]
    struct Sources(Vec<String>, Vec<usize>);

    impl FrameObserver for Sources {
        fn begin_source(&mut self, name: &str) {
            self.0.push(name.to_string());
        }
        fn frame(&mut self, source: usize, _: u64, _: u64, _: &Aggregate) {
            self.1.push(source);
        }
    }

    #[test]
    fn files_dealt_round_robin_merge_back_into_the_capture() {
        // Distinct times, so that the capture's order is the only time order.
        let frames: Vec<Frame> = demo()
            .into_iter()
            .enumerate()
            .map(|(k, f)| Frame {
                ts_ns: synth::BASE_TS_NS + k as u64 * 1_000,
                ..f
            })
            .collect();
        let parts: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                let part: Vec<Frame> = frames.iter().skip(i).step_by(3).cloned().collect();
                pcap_ns(&part)
            })
            .collect();
        let mut r = Replay::observed(Sources::default());
        merged(
            &mut r,
            &[("c", &parts[2]), ("a", &parts[0]), ("b", &parts[1])],
        );
        assert_eq!(r.agg, direct(&frames));
        assert_eq!(r.files, vec!["c", "a", "b"]);
        assert_eq!(r.observer.0, r.files);
        let want: Vec<usize> = (0..frames.len()).map(|k| [1, 2, 0][k % 3]).collect();
        assert_eq!(r.observer.1, want);
        let span = frames.last().unwrap().ts_ns - frames[0].ts_ns;
        assert_eq!(r.window_seconds(), span as f64 / 1e9);
        // Dealt round robin, every file holds flows of the others at the same time.
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings[0].starts_with("a overlaps the files before it in time"));
        assert!(r.warnings[1].starts_with("b overlaps the files before it in time"));
    }

    #[test]
    fn frames_of_the_same_time_keep_the_order_of_the_files() {
        let f = demo().remove(0);
        let one = pcap_ns(std::slice::from_ref(&f));
        let mut r = Replay::observed(Sources::default());
        merged(&mut r, &[("x", &one), ("y", &one), ("z", &one)]);
        assert_eq!(r.observer.1, vec![0, 1, 2]);
    }

    #[test]
    fn the_file_named_is_the_later_given_whichever_comes_first_in_time() {
        // Flow X in both files, the second given starting earlier; flow Y only in a third
        // file at the same time: only the second file holds flows of a file before it.
        let frames = demo();
        let x = &frames[0];
        let y = frames
            .iter()
            .find(|f| f.bytes[30..34] != x.bytes[30..34])
            .unwrap();
        let at = |f: &Frame, ts: u64| Frame {
            bytes: f.bytes.clone(),
            ts_ns: synth::BASE_TS_NS + ts,
        };
        let first = pcap_ns(&[at(x, 10_000), at(x, 20_000)]);
        let second = pcap_ns(&[at(x, 0), at(x, 15_000)]);
        let third = pcap_ns(&[at(y, 12_000)]);
        let mut r = Replay::new();
        merged(
            &mut r,
            &[("first", &first), ("second", &second), ("third", &third)],
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(
            r.warnings[0].starts_with(
                "second overlaps the files before it in time and holds some of their flows"
            ),
            "{:?}",
            r.warnings
        );
    }
}
