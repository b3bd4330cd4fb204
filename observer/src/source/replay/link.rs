//! Link types: how the frames of a capture's link type (Ethernet, Linux cooked v1 and v2, raw
//! IP) reach the parser.

use observer_common::{Parsed, SkipReason, parse_frame, parse_frame_from, wire};
use pcap_file::DataLink;

/// How frames of a link type reach the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
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
    pub(crate) fn of(dl: DataLink) -> Result<Self, (String, u32)> {
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
    pub(crate) fn parse(self, f: &[u8]) -> Parsed {
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

#[cfg(test)]
mod tests {
    use pcap_file::{Endianness, TsResolution};

    use super::super::tests::{demo, direct, ethernet, pcap, raw_ip, replay_bytes, sll, sll2};
    use super::*;
    use crate::aggregate::Aggregate;
    use crate::source::synth::Frame;

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
}
