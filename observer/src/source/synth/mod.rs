//! Synthetic RoCEv2 traffic with independent ground truth.
//!
//! [`RoceFrame`] encodes one RoCEv2 packet (Ethernet, VLAN tags, IPv4/IPv6, UDP, BTH, the extension
//! headers its opcode implies, payload and the real ICRC). [`QpStream`] emits the correctly
//! sequenced requests of one queue pair and the responder's answers, and injects loss and
//! go-back-N retransmission. [`Workload`] collects frames together with the [`Truth`] the observer
//! must report for them. The truth is derived from what the generator meant to build (the operation
//! class it chose, the PSN events it injected, the reason it broke a frame), never by parsing its own
//! output: tests compare the kernel program and the parser against it.
//!
//! [`scenario`] builds the named workloads of [`SCENARIOS`]; [`send`] transmits frames on an
//! interface and [`write_pcap`] writes them to a capture file.
//!
//! All addresses are documentation/benchmark ranges (198.18.0.0/15, 2001:db8::/32); all MACs are
//! locally administered unicast (02:...).
//!
//! One job per file:
//!
//! - `frame`: one RoCEv2 frame ([`RoceFrame`], [`Ip`], [`Ext`]), the opcode tables, the header
//!   writers, checksums and the ICRC;
//! - `workload`: frames and their truth ([`Workload`], [`Truth`], [`PsnEvent`]);
//! - `qp`: the sequenced traffic of one queue pair ([`QpStream`]);
//! - `script`: requests and answers of several queue pairs at chosen capture times
//!   ([`Script`]), with the latency samples the answers give;
//! - `noise`: frames the observer must skip, at least one per
//!   [`SkipReason`](observer_common::SkipReason);
//! - `encap`: mirror encapsulation ([`Encap`]) and MAC control (PAUSE and PFC) frames;
//! - `scenarios`: the named workloads, one file per family;
//! - `output`: the raw socket and the pcap writer.

use std::io;
use std::time::Duration;

use observer_common::wire;

mod encap;
mod frame;
mod noise;
mod output;
mod qp;
mod scenarios;
mod script;
mod workload;

pub use encap::{
    Encap, MAC_CONTROL_DST, encapsulate, link_pause, pause_frame, pfc, pfc_frame, quanta_at,
};
pub use frame::{
    Ext, ExtHeader, Ip, RoceFrame, ext_headers, host_mac, intended_class, opcode_defined,
};
pub use noise::{basic_noise, extra_noise, mirror_noise};
pub use output::{PacketSocket, pcap_bytes, send, write_pcap};
pub use qp::{PortRule, QpStream, rxe_local_sport};
pub use scenarios::{
    CNP_INTERVAL_NS, PFC_SENDERS, RULE_FRAME_GAP_NS, SCENARIOS, USER_SCENARIOS, scenario,
    scenario_names,
};
pub use scenarios::{NIC_DEVICE, NIC_NETDEV};
pub use script::{ConnId, ReqId, Script};
pub use workload::NicReadings;
pub use workload::{ConnTruth, Frame, JobTruth, PsnEvent, Truth, Workload, played_again};

// The drivers' source-port rule lives with the ECMP analysis; the generator uses it.
pub use observer_common::wire::{flow_label_to_udp_sport, rdma_udp_sport};

const MASK24: u32 = wire::PSN_MASK;
/// AETH syndrome of a plain ACK with an unlimited credit count.
pub const SYNDROME_ACK: u8 = 0x1F;
/// AETH syndrome of a NAK "PSN sequence error" (the PSN names the expected PSN).
pub const SYNDROME_NAK_SEQ: u8 = wire::NAK_PSN_SEQUENCE_ERROR;
/// AETH syndrome of an RNR NAK (timer code 14).
pub const SYNDROME_RNR_NAK: u8 = 0x20 | 14;
/// DSCP and ECN of data traffic in the scenarios (priority 3, ECT(0)).
pub const DATA_DSCP: u8 = 26;
pub const ECT0: u8 = 2;
pub const ECT1: u8 = 1;
pub const NOT_ECT: u8 = 0;
pub const CE: u8 = 3;
/// DSCP of CNPs (priority 6).
pub const CNP_DSCP: u8 = 48;
/// P_Key of the default partition.
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// Path MTU of the scenarios' queue pairs.
pub const SCENARIO_PMTU: u32 = 1024;
/// Capture timestamp of a workload's first frame (2025-06-15) and the spacing of its frames.
pub const BASE_TS_NS: u64 = 1_750_000_000_000_000_000;
pub const FRAME_GAP_NS: u64 = 1_000;
/// [`send`] pauses [`SEND_PAUSE`] after every [`SEND_BATCH`] frames so that a veth peer's
/// 256-entry XDP ring never overflows.
pub const SEND_BATCH: usize = 64;
pub const SEND_PAUSE: Duration = Duration::from_micros(500);

/// Errors of [`send`] and [`write_pcap`].
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("no network interface named {0:?}")]
    UnknownInterface(String),
    #[error("sending raw frames on {0:?} needs CAP_NET_RAW (run as root or grant the capability)")]
    NeedsCapNetRaw(String),
    #[error("{what} for interface {iface:?} failed")]
    Socket {
        iface: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sending frame {index} ({len} bytes) on {iface:?} failed")]
    Send {
        iface: String,
        index: usize,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("frame {index}: only {sent} of {len} bytes were sent on {iface:?}")]
    ShortSend {
        iface: String,
        index: usize,
        len: usize,
        sent: usize,
    },
    #[error("frame {index} is too long for a pcap record ({len} bytes)")]
    FrameTooLong { index: usize, len: usize },
    #[error("writing the pcap failed")]
    Pcap(#[from] pcap_file::PcapError),
    #[error("writing the pcap failed")]
    Io(#[from] io::Error),
}

#[cfg(test)]
mod tests {
    use super::scenario as synth_scenario;

    #[test]
    fn each_rules_scenario_is_a_synth_scenario_named_after_it() {
        for rule in crate::analysis::findings::rules() {
            let Some(scenario) = rule.scenario() else {
                // A replay's flow table is unbounded and it drops nothing: only a live run
                // fills the one or drops.
                assert!(
                    ["flow-table-full", "observer-drops"].contains(&rule.name()),
                    "{}",
                    rule.name()
                );
                continue;
            };
            assert!(
                synth_scenario(scenario).is_some(),
                "{}: no synth scenario {scenario}",
                rule.name()
            );
            assert_eq!(scenario, format!("rule-{}", rule.name()));
        }
    }
}
