//! pcapng: blocks in sections, each interface with its own link type and timestamp units; frames
//! of interfaces whose link type is not supported (or that were never described) are counted as
//! [`UNSUPPORTED_LINK_TYPE`].

use std::io::Read;

use pcap_file::{
    Endianness, PcapError,
    pcapng::{
        Block, PcapNgParser,
        blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
    },
};

use super::{
    Ctx, Feed, FeedError, Link, Pending, ReplayError, Step, UNSUPPORTED_LINK_TYPE, header,
};

/// A pcapng being read: its parser (the section's byte order), the interfaces of the current
/// section, and the latest timestamp (a simple packet block has none of its own).
pub(super) struct PcapNg {
    parser: PcapNgParser,
    interfaces: Vec<Interface>,
    last_ts: u64,
}

impl PcapNg {
    /// Reads the section header.
    pub(super) fn open<R: Read>(
        feed: &mut Feed<'_, R>,
        ctx: &mut Ctx,
    ) -> Result<Self, ReplayError> {
        let (parser, used) = header(feed, &ctx.name, PcapNgParser::new)?;
        ctx.offset = used;
        Ok(Self {
            parser,
            interfaces: Vec::new(),
            last_ts: 0,
        })
    }

    /// The next frame of a supported interface (the blocks before it are taken in); none at the
    /// end of the file or at a break (a warning in `ctx` then).
    pub(super) fn next<R: Read>(
        &mut self,
        feed: &mut Feed<'_, R>,
        ctx: &mut Ctx,
    ) -> Option<Pending> {
        loop {
            let mut block_err = None;
            let mut frame = None;
            let fed = feed.next(|buf| {
                let (rest, raw) = match self.parser.next_raw_block(buf) {
                    Ok(ok) => ok,
                    Err(PcapError::IncompleteBuffer) => return Step::More,
                    Err(e) => return Step::Fail(e),
                };
                let used = buf.len() - rest.len();
                let block = match self.parser.section().endianness {
                    Endianness::Big => raw.try_into_block::<byteorder_slice::BigEndian>(),
                    Endianness::Little => raw.try_into_block::<byteorder_slice::LittleEndian>(),
                };
                match block {
                    Ok(block) => frame = self.block(ctx, buf, block),
                    Err(e) => block_err = Some(e),
                }
                Step::Used(used)
            });
            if let Some(e) = block_err {
                ctx.broken(&FeedError::Parse(e).describe());
                return None;
            }
            match fed {
                Ok(0) => return None,
                Ok(used) => {
                    ctx.offset += used as u64;
                    ctx.progress.tick(ctx.offset, ctx.frame);
                    if frame.is_some() {
                        return frame;
                    }
                }
                Err(e) => {
                    ctx.broken(&e.describe());
                    return None;
                }
            }
        }
    }

    /// Takes in a block whose bytes start `buf`; a frame to account, if it is one.
    fn block(&mut self, ctx: &mut Ctx, buf: &[u8], block: Block) -> Option<Pending> {
        match block {
            Block::SectionHeader(_) => {
                self.interfaces.clear();
                None
            }
            Block::InterfaceDescription(idb) => {
                let iface = Interface::of(&idb);
                if let Err((name, number)) = &iface.link {
                    ctx.warnings.push(format!(
                        "{}: interface {} has unsupported link type {name} ({number}); its frames are counted as {UNSUPPORTED_LINK_TYPE}",
                        ctx.name,
                        self.interfaces.len()
                    ));
                }
                self.interfaces.push(iface);
                None
            }
            Block::EnhancedPacket(epb) => {
                if let Some(i) = self.interfaces.get(epb.interface_id as usize) {
                    self.last_ts = i.ns(epb.timestamp.as_nanos() as u64);
                }
                self.packet(ctx, epb.interface_id, buf, &epb.data, epb.original_len)
            }
            Block::SimplePacket(spb) => self.packet(ctx, 0, buf, &spb.data, spb.original_len),
            Block::Packet(pb) => {
                if let Some(i) = self.interfaces.get(pb.interface_id as usize) {
                    self.last_ts = i.ns(pb.timestamp);
                }
                self.packet(
                    ctx,
                    u32::from(pb.interface_id),
                    buf,
                    &pb.data,
                    pb.original_len,
                )
            }
            _ => None,
        }
    }

    /// A packet block of interface `id` whose `data` lie in `buf`: a frame to account, unless
    /// its interface's link type is unsupported (or it has no interface).
    fn packet(
        &self,
        ctx: &mut Ctx,
        id: u32,
        buf: &[u8],
        data: &[u8],
        orig_len: u32,
    ) -> Option<Pending> {
        ctx.frame += 1;
        match self.interfaces.get(id as usize).map(|i| &i.link) {
            Some(Ok(link)) => Some(Pending {
                ts_ns: self.last_ts,
                orig_len,
                link: *link,
                at: super::offset_in(buf, data),
                len: data.len(),
            }),
            // Unsupported link type, or no such interface.
            other => {
                if other.is_none() && !ctx.unknown_interfaces.contains(&id) {
                    ctx.unknown_interfaces.push(id);
                    ctx.warnings.push(format!(
                        "{}: frame {} at byte {}: interface {id} was never described; its frames are counted as {UNSUPPORTED_LINK_TYPE}",
                        ctx.name, ctx.frame, ctx.offset
                    ));
                }
                ctx.unsupported += 1;
                None
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use pcap_file::{
        DataLink,
        pcapng::{
            PcapNgWriter,
            blocks::{enhanced_packet::EnhancedPacketBlock, section_header::SectionHeaderBlock},
        },
    };

    use super::super::tests::{demo, direct, raw_ip, replay_bytes, sll2};
    use super::*;
    use crate::aggregate::Aggregate;

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
}
