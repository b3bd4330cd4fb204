//! Classic pcap: the file header (byte order, timestamp resolution, link type), then one record
//! per frame.

use std::io::Read;

use pcap_file::{PcapError, TsResolution, pcap::PcapParser};

use super::{Ctx, Feed, Link, Pending, ReplayError, Step, header};

/// A classic pcap being read: its parser (byte order), link type and timestamp unit.
pub(super) struct Pcap {
    parser: PcapParser,
    link: Link,
    frac_ns: u64,
}

impl Pcap {
    /// Reads the file header.
    pub(super) fn open<R: Read>(
        feed: &mut Feed<'_, R>,
        ctx: &mut Ctx,
    ) -> Result<Self, ReplayError> {
        let (parser, used) = header(feed, &ctx.name, PcapParser::new)?;
        let header = parser.header();
        let link = Link::of(header.datalink).map_err(|(name, number)| {
            ReplayError::UnsupportedLinkType {
                file: ctx.name.clone(),
                name,
                number,
            }
        })?;
        let frac_ns: u64 = match header.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        };
        ctx.offset = used;
        Ok(Self {
            parser,
            link,
            frac_ns,
        })
    }

    /// The next frame; none at the end of the file or at a break (a warning in `ctx` then).
    #[inline(always)]
    pub(super) fn next<R: Read>(
        &mut self,
        feed: &mut Feed<'_, R>,
        ctx: &mut Ctx,
    ) -> Option<Pending> {
        let (parser, link, frac_ns) = (&self.parser, self.link, self.frac_ns);
        let mut frame = None;
        let fed = feed.next(|buf| match parser.next_raw_packet(buf) {
            Ok((rest, raw)) => {
                frame = Some(Pending {
                    ts_ns: raw.ts_sec as u64 * 1_000_000_000 + raw.ts_frac as u64 * frac_ns,
                    orig_len: raw.orig_len,
                    link,
                    at: super::offset_in(buf, &raw.data),
                    len: raw.data.len(),
                });
                Step::Used(buf.len() - rest.len())
            }
            Err(PcapError::IncompleteBuffer) => Step::More,
            Err(e) => Step::Fail(e),
        });
        match fed {
            Ok(0) => None,
            Ok(used) => {
                ctx.advance(used as u64);
                frame
            }
            Err(e) => {
                ctx.broken(&e.describe());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pcap_file::{
        DataLink, Endianness,
        pcap::{PcapPacket, PcapWriter},
    };

    use super::super::tests::{demo, direct, ethernet, pcap, replay_bytes};
    use super::*;

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
}
