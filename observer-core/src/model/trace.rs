//! A traced path (`roce-observer trace`): the routers that answered a QP's probes, TTL by TTL.
//! Written by the prober (`roce_observer::trace`) and read by `fabric --paths`.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The trace file's schema name (`trace --json`, read by `fabric --paths`).
pub const TRACE_SCHEMA: &str = "roce-observer.trace/1";

/// What answered a TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    /// A router on the way: the TTL ran out there.
    TimeExceeded,
    /// The destination itself (port unreachable: a host without RoCE on 4791).
    Reached,
    /// Another unreachable (ICMP type and code): the path ends there.
    Unreachable { icmp_type: u8, code: u8 },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub ttl: u8,
    /// Who answered; none when nothing did.
    pub address: Option<IpAddr>,
    pub rtt_us: Option<u64>,
    pub answer: Option<Answer>,
}

/// How a trace ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum End {
    /// The destination answered.
    Reached,
    /// `gaps` TTLs in a row went unanswered (a RoCE NIC drops the probe silently).
    Silent,
    /// Something on the way said the destination is unreachable.
    Unreachable,
    /// The largest TTL was answered by a router.
    MaxTtl,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The source address the probes left from.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dscp: u8,
    pub dest_qp: u32,
    pub hops: Vec<Hop>,
    pub end: End,
}

impl Trace {
    /// The routers on the way, in order, up to the last that answered: none where a TTL went
    /// unanswered before it (the path is then not known in full). Silent TTLs after the last
    /// answer, and the destination's own answer, are left out.
    pub fn routers(&self) -> Option<Vec<IpAddr>> {
        let last = self
            .hops
            .iter()
            .rposition(|h| h.answer == Some(Answer::TimeExceeded))?;
        self.hops[..=last].iter().map(|h| h.address).collect()
    }
}

/// The file `trace --json` writes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceFile {
    pub schema: String,
    pub traces: Vec<Trace>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routers_up_to_the_last_answer_and_none_with_a_hole() {
        let hop = |ttl, a: Option<&str>, answer| Hop {
            ttl,
            address: a.map(|a| a.parse().unwrap()),
            rtt_us: None,
            answer,
        };
        let te = Some(Answer::TimeExceeded);
        let mut t = Trace {
            src: "198.18.1.2".parse().unwrap(),
            dst: "198.18.2.2".parse().unwrap(),
            sport: 1,
            dscp: 0,
            dest_qp: 1,
            hops: vec![
                hop(1, Some("198.19.0.1"), te),
                hop(2, Some("198.19.0.2"), te),
                hop(3, None, None),
                hop(4, None, None),
            ],
            end: End::Silent,
        };
        assert_eq!(t.routers().unwrap().len(), 2);
        t.hops[0] = hop(1, None, None);
        assert_eq!(t.routers(), None);
    }
}
