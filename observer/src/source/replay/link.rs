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

    /// The two hosts of a frame the parser will not decapsulate (IP, and not GRE), as
    /// [`host_pair`] of its addresses; none for any other frame (a mirror copy's hosts are
    /// those of the packet inside it: the parser has to say). Read before the parser, to deal
    /// frames out by their hosts: when the parser makes a RoCE packet of a frame given here, its
    /// addresses are these.
    #[inline(always)]
    pub(crate) fn hosts(self, f: &[u8]) -> Option<u64> {
        let be16 = |at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let (mut ethertype, mut off) = match self {
            Self::Ethernet => (be16(12)?, wire::ETH_HEADER_LEN),
            Self::Sll => (be16(14)?, 16),
            Self::Sll2 => (be16(0)?, 20),
            Self::RawIp => match f.first()? >> 4 {
                4 => (wire::ETHERTYPE_IPV4, 0),
                6 => (wire::ETHERTYPE_IPV6, 0),
                _ => return None,
            },
            Self::Ipv4 => (wire::ETHERTYPE_IPV4, 0),
            Self::Ipv6 => (wire::ETHERTYPE_IPV6, 0),
        };
        // The parser's VLAN tags: two at most.
        for _ in 0..wire::MAX_VLAN_TAGS {
            if ethertype == wire::ETHERTYPE_VLAN || ethertype == wire::ETHERTYPE_QINQ {
                ethertype = be16(off + 2)?;
                off += wire::VLAN_TAG_LEN;
            }
        }
        if ethertype == wire::ETHERTYPE_IPV4 {
            let h = f.get(off..off + 20)?;
            if h[0] >> 4 != 4 || h[9] == wire::IPPROTO_GRE {
                return None;
            }
            // v4-mapped, as the parser stores them.
            let mapped = |a: &[u8]| {
                let mut ip = [0u8; 16];
                ip[10] = 0xFF;
                ip[11] = 0xFF;
                ip[12..].copy_from_slice(a);
                ip
            };
            Some(host_pair(&mapped(&h[12..16]), &mapped(&h[16..20])))
        } else if ethertype == wire::ETHERTYPE_IPV6 {
            let h = f.get(off..off + 40)?;
            if h[0] >> 4 != 6 || h[6] == wire::IPPROTO_GRE {
                return None;
            }
            let ip = |a: &[u8]| <[u8; 16]>::try_from(a).ok();
            Some(host_pair(&ip(&h[8..24])?, &ip(&h[24..40])?))
        } else {
            None
        }
    }
}

/// Two hosts, in either order, hashed: what deals frames out to shards.
#[inline(always)]
pub(crate) fn host_pair(a: &[u8; 16], b: &[u8; 16]) -> u64 {
    let (x, y) = (u128::from_ne_bytes(*a), u128::from_ne_bytes(*b));
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    let fold = |v: u128| (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
    (fold(lo) ^ fold(hi).rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
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

    #[test]
    fn the_hosts_read_ahead_are_those_the_parser_finds() {
        // Every frame of every scenario (direct, VLAN, IPv6, mirror copies, PAUSE / PFC,
        // noise), as each link type carries it, cut at every length: whatever the parser makes
        // a RoCE packet of has the hosts read ahead, when they were.
        let mut checked = 0;
        for name in crate::source::synth::scenario_names() {
            let frames = crate::source::synth::scenario(name).unwrap().frames;
            for f in frames.iter().take(40) {
                let forms: [(Link, Vec<u8>); 4] = [
                    (Link::Ethernet, ethernet(&f.bytes)),
                    (Link::Sll, sll(&f.bytes)),
                    (Link::Sll2, sll2(&f.bytes)),
                    (Link::RawIp, raw_ip(&f.bytes)),
                ];
                for (link, bytes) in forms {
                    for cut in 0..=bytes.len().min(300) {
                        let b = &bytes[..cut];
                        let Some(hosts) = link.hosts(b) else { continue };
                        if let Ok(p) = link.parse(b).result {
                            assert_eq!(hosts, host_pair(&p.src_ip, &p.dst_ip), "{name} {link:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
        // Either order of the hosts.
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_eq!(host_pair(&a, &b), host_pair(&b, &a));
    }
}
