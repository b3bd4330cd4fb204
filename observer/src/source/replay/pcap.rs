//! Classic pcap: the file header (byte order, timestamp resolution, link type), then one record
//! per frame.

use std::io::Read;

use pcap_file::{PcapError, TsResolution, pcap::PcapParser};

use super::{Ctx, Feed, FrameObserver, Link, Replay, ReplayError, Step};

impl<O: FrameObserver> Replay<O> {
    pub(super) fn pcap<R: Read>(
        &mut self,
        mut feed: Feed<'_, R>,
        ctx: &mut Ctx,
    ) -> Result<(), ReplayError> {
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
