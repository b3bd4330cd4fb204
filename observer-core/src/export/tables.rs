//! The record tables: every column, once. The head's columns start every table's rows.

use std::borrow::Cow;

use super::{
    BucketItem, ChType, Column, ColumnInfo, FindingItem, Head, IntervalItem, Nums, PauseItem,
    QpItem, SideItem, Value, direction, ip,
};
use crate::model::{Ops, connections::LatencySummary};

/// A table: its name, what a row is, its ClickHouse sorting and the columns after the head's.
pub struct Table<G: 'static> {
    pub name: &'static str,
    pub row: &'static str,
    /// The ClickHouse ORDER BY (the head's columns and this table's).
    pub order_by: &'static str,
    pub columns: &'static [Column<G>],
}

/// A table with its columns' descriptions only: what the schema and the docs read.
pub struct TableInfo {
    pub name: &'static str,
    pub row: &'static str,
    pub order_by: &'static str,
    pub columns: Vec<ColumnInfo>,
}

impl<G> Table<G> {
    /// The head's columns, then the table's.
    pub fn info(&self) -> TableInfo {
        TableInfo {
            name: self.name,
            row: self.row,
            order_by: self.order_by,
            columns: HEAD
                .iter()
                .map(|c| c.info)
                .chain(self.columns.iter().map(|c| c.info))
                .collect(),
        }
    }
}

/// Every table, in the order the schema and the docs give them.
pub fn tables() -> [TableInfo; 6] {
    [
        QP_INTERVALS.info(),
        CONNECTION_SIDES.info(),
        LATENCY_BUCKETS.info(),
        PAUSES.info(),
        FINDINGS.info(),
        INTERVALS.info(),
    ]
}

/// The names of every table (a row's `table` indexes it).
pub const TABLES: [&str; 6] = [
    QP_INTERVALS.name,
    CONNECTION_SIDES.name,
    LATENCY_BUCKETS.name,
    PAUSES.name,
    FINDINGS.name,
    INTERVALS.name,
];

const fn col<G>(
    name: &'static str,
    attribute: &'static str,
    ty: ChType,
    help: &'static str,
    get: G,
) -> Column<G> {
    Column {
        info: ColumnInfo {
            name,
            attribute,
            ty,
            help,
        },
        get,
    }
}

pub type HeadGet = for<'r> fn(&Head<'r>) -> Value<'r>;

/// The head's columns that are the exporter's, the same in every row ([`super::per_exporter`]);
/// the others number the row and bound its interval.
pub const EXPORTER_COLUMNS: [&str; 8] = [
    "schema_version",
    "exporter",
    "host",
    "rdma_device",
    "observed",
    "source",
    "job",
    "rank",
];

/// The columns every row starts with.
pub const HEAD: &[Column<HeadGet>] = &[
    col(
        "schema_version",
        "roce.schema.version",
        ChType::UInt16,
        "The record schema's version",
        |_| Value::U64(super::SCHEMA_VERSION.into()),
    ),
    col(
        "exporter",
        "roce.exporter.id",
        ChType::Label,
        "The exporter's stream: host, process and start; its sequence numbers count from 0",
        |h| Value::str(&h.resource.exporter),
    ),
    col(
        "interval_seq",
        "roce.interval.seq",
        ChType::UInt64,
        "The exporter's interval number, 0, 1, 2... (a gap: an interval lost)",
        |h| Value::U64(h.interval.seq),
    ),
    col(
        "seq",
        "roce.record.seq",
        ChType::UInt64,
        "The row's number among the exporter's rows of this table, 0, 1, 2... (a gap: a row lost)",
        |h| Value::U64(h.seq),
    ),
    col(
        "interval_start_ns",
        "roce.interval.start",
        ChType::UInt64,
        "Start of the interval, Unix-epoch ns",
        |h| Value::U64(h.interval.start_ns),
    ),
    col(
        "interval_end_ns",
        "roce.interval.end",
        ChType::UInt64,
        "End of the interval, Unix-epoch ns",
        |h| Value::U64(h.interval.end_ns),
    ),
    col(
        "host",
        "host.name",
        ChType::Label,
        "The host the exporter runs on",
        |h| Value::str(&h.resource.host),
    ),
    col(
        "rdma_device",
        "rdma.device",
        ChType::Label,
        "The RDMA devices of the host's NIC side the report read, comma separated, or empty",
        |h| Value::str(&h.resource.rdma_device),
    ),
    col(
        "observed",
        "roce.observed",
        ChType::Label,
        "The interfaces (XDP, libpcap) or capture files observed, comma separated",
        |h| Value::str(&h.resource.observed),
    ),
    col(
        "source",
        "roce.source",
        ChType::Label,
        "How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)",
        |h| Value::str(&h.resource.source),
    ),
    col(
        "job",
        "roce.job.id",
        ChType::Label,
        "The training jobs of the host's processes that own RC QPs, from their launchers' variables, comma separated (empty: not known)",
        |h| Value::str(&h.resource.job),
    ),
    col(
        "rank",
        "roce.job.rank",
        ChType::Label,
        "The ranks of the host's processes that own RC QPs, from their environments: 0-3,8 (empty: not known)",
        |h| Value::str(&h.resource.rank),
    ),
];

pub type QpGet = for<'r> fn(&QpItem<'r>) -> Value<'r>;

/// Ops counts as (column, attribute, help, getter) for a table.
macro_rules! ops_columns {
    ($get:ty, $prefix:literal, $attr:literal, $ops:expr) => {
        [
            col::<$get>(
                concat!($prefix, "send"),
                concat!("roce.", $attr, ".send"),
                ChType::Count,
                "SEND packets",
                |r| Value::U64($ops(r).send),
            ),
            col::<$get>(
                concat!($prefix, "write"),
                concat!("roce.", $attr, ".write"),
                ChType::Count,
                "RDMA WRITE packets",
                |r| Value::U64($ops(r).write),
            ),
            col::<$get>(
                concat!($prefix, "read_request"),
                concat!("roce.", $attr, ".read_request"),
                ChType::Count,
                "RDMA READ requests",
                |r| Value::U64($ops(r).read_request),
            ),
            col::<$get>(
                concat!($prefix, "read_response"),
                concat!("roce.", $attr, ".read_response"),
                ChType::Count,
                "RDMA READ response packets",
                |r| Value::U64($ops(r).read_response),
            ),
            col::<$get>(
                concat!($prefix, "ack"),
                concat!("roce.", $attr, ".ack"),
                ChType::Count,
                "ACKs",
                |r| Value::U64($ops(r).ack),
            ),
            col::<$get>(
                concat!($prefix, "nak"),
                concat!("roce.", $attr, ".nak"),
                ChType::Count,
                "NAKs (PSN sequence error and the other NAK codes)",
                |r| Value::U64($ops(r).nak),
            ),
            col::<$get>(
                concat!($prefix, "rnr_nak"),
                concat!("roce.", $attr, ".rnr_nak"),
                ChType::Count,
                "RNR NAKs (receiver not ready)",
                |r| Value::U64($ops(r).rnr_nak),
            ),
            col::<$get>(
                concat!($prefix, "atomic"),
                concat!("roce.", $attr, ".atomic"),
                ChType::Count,
                "Atomic requests",
                |r| Value::U64($ops(r).atomic),
            ),
            col::<$get>(
                concat!($prefix, "atomic_ack"),
                concat!("roce.", $attr, ".atomic_ack"),
                ChType::Count,
                "Atomic ACKs",
                |r| Value::U64($ops(r).atomic_ack),
            ),
            col::<$get>(
                concat!($prefix, "cnp"),
                concat!("roce.", $attr, ".cnp"),
                ChType::Count,
                "Congestion notification packets (CNP)",
                |r| Value::U64($ops(r).cnp),
            ),
            col::<$get>(
                concat!($prefix, "other"),
                concat!("roce.", $attr, ".other"),
                ChType::Count,
                "Other opcodes (reserved, vendor, unknown AETH codes)",
                |r| Value::U64($ops(r).other),
            ),
        ]
    };
}

fn flow_ops<'r>(r: &QpItem<'r>) -> &'r Ops {
    &r.flow.ops
}

const QP_OPS: [Column<QpGet>; 11] = ops_columns!(QpGet, "ops_", "ops", flow_ops);

const QP_OWN: [Column<QpGet>; 30] = [
    col(
        "direction",
        "network.io.direction",
        ChType::Label,
        "receive or transmit (host mode's TC egress), as the observation point saw it",
        |r| direction(r.flow.direction),
    ),
    col(
        "vantage",
        "roce.vantage",
        ChType::Label,
        "host (the packets themselves) or mirror (copies through a mirror session)",
        |r| {
            Value::str(if r.flow.mirror.is_some() {
                "mirror"
            } else {
                "host"
            })
        },
    ),
    col(
        "mirror_session",
        "roce.mirror.session",
        ChType::Label,
        "The ERSPAN session ID of mirror copies, or the encapsulation without one, or empty",
        |r| {
            r.flow
                .mirror
                .as_ref()
                .map_or(Value::str(""), |m| match m.session {
                    Some(s) => Value::str(s.to_string()),
                    None => Value::str(m.kind.as_deref().unwrap_or_default()),
                })
        },
    ),
    col(
        "src_addr",
        "source.address",
        ChType::String,
        "Source IP address",
        |r| ip(&r.flow.src_ip),
    ),
    col(
        "dst_addr",
        "destination.address",
        ChType::String,
        "Destination IP address",
        |r| ip(&r.flow.dst_ip),
    ),
    col(
        "src_port",
        "source.port",
        ChType::UInt16,
        "UDP source port (the ECMP entropy; the destination port is 4791)",
        |r| Value::U64(r.flow.udp_src_port.into()),
    ),
    col(
        "dest_qp",
        "rdma.qp.destination",
        ChType::UInt32,
        "BTH destination QP",
        |r| Value::U64(r.flow.dest_qp.into()),
    ),
    col(
        "transports",
        "roce.transports",
        ChType::Strings,
        "The transports of its opcodes (RC, UC, UD, XRC, CNP...)",
        |r| Value::Strs(Cow::Borrowed(&r.flow.transports)),
    ),
    col(
        "packets",
        "roce.packets",
        ChType::Count,
        "RoCEv2 packets",
        |r| Value::U64(r.flow.packets),
    ),
    col(
        "bytes",
        "roce.bytes",
        ChType::Count,
        "RoCEv2 bytes (IP length)",
        |r| Value::U64(r.flow.bytes),
    ),
    col(
        "ecn_not_ect",
        "roce.ecn.not_ect",
        ChType::Count,
        "Packets with ECN Not-ECT",
        |r| Value::U64(r.flow.ecn.not_ect),
    ),
    col(
        "ecn_ect0",
        "roce.ecn.ect0",
        ChType::Count,
        "Packets with ECN ECT(0)",
        |r| Value::U64(r.flow.ecn.ect0),
    ),
    col(
        "ecn_ect1",
        "roce.ecn.ect1",
        ChType::Count,
        "Packets with ECN ECT(1)",
        |r| Value::U64(r.flow.ecn.ect1),
    ),
    col(
        "ce",
        "roce.ecn.ce",
        ChType::Count,
        "Packets marked CE (congestion experienced)",
        |r| Value::U64(r.flow.ecn.ce),
    ),
    col(
        "psn_gaps",
        "roce.psn.gaps",
        ChType::Count,
        "Request PSNs ahead of the expected one (each opened a hole: loss or reordering)",
        |r| Value::U64(r.flow.psn.gaps),
    ),
    col(
        "psn_missing",
        "roce.psn.missing",
        ChType::Count,
        "PSNs confirmed lost (their hole left the analysis window unfilled)",
        |r| Value::U64(r.flow.psn.missing),
    ),
    col(
        "psn_regressions",
        "roce.psn.regressions",
        ChType::Count,
        "Request PSNs behind the expected one",
        |r| Value::U64(r.flow.psn.regressions),
    ),
    col(
        "psn_out_of_order",
        "roce.psn.out_of_order",
        ChType::Count,
        "PSNs that filled a hole late (reordering, not loss)",
        |r| Value::U64(r.flow.psn.out_of_order),
    ),
    col(
        "psn_duplicates",
        "roce.psn.duplicates",
        ChType::Count,
        "Copies of a PSN seen before at this point (a second tap, a mirror twice)",
        |r| Value::U64(r.flow.psn.duplicates),
    ),
    col(
        "psn_retransmissions",
        "roce.psn.retransmissions",
        ChType::Count,
        "Request PSNs sent again (go-back-N runs, resends after a timeout or RNR wait)",
        |r| Value::U64(r.flow.psn.retransmissions),
    ),
    col(
        "psn_retransmission_episodes",
        "roce.psn.retransmission_episodes",
        ChType::Count,
        "Resend episodes (one go-back-N run is one)",
        |r| Value::U64(r.flow.psn.retransmission_episodes),
    ),
    col(
        "psn_lost_events",
        "roce.psn.lost_events",
        ChType::Count,
        "Loss events (a hole confirmed lost, however many PSNs)",
        |r| Value::U64(r.flow.psn.lost_events),
    ),
    col(
        "psn_resets",
        "roce.psn.resets",
        ChType::Count,
        "Restarts of the PSN analysis (a QP number used again by a new connection)",
        |r| Value::U64(r.flow.psn.resets),
    ),
    col(
        "psn_violations",
        "roce.psn.violations",
        ChType::Count,
        "PSN behaviour no transport allows (verified against the responder's answers)",
        |r| Value::U64(r.flow.psn.violations),
    ),
    col(
        "nak_seq_errors",
        "roce.nak.sequence_errors",
        ChType::Count,
        "NAKs with the PSN sequence error code",
        |r| Value::U64(r.flow.psn.nak_seq_errors),
    ),
    col(
        "pmtu",
        "roce.pmtu",
        ChType::UInt32,
        "The path MTU its FIRST and MIDDLE packets show (0: not seen)",
        |r| Value::U64(r.flow.psn.pmtu.unwrap_or(0).into()),
    ),
    col(
        "dscp",
        "roce.dscp",
        ChType::UInt64s,
        "The DSCP values its packets carried",
        |r| Value::U64s(Nums::U8(&r.flow.dscp)),
    ),
    col(
        "vlans",
        "roce.vlan.ids",
        ChType::UInt64s,
        "The VLAN IDs (outer tag) its packets carried",
        |r| Value::U64s(Nums::U16(&r.flow.vlans)),
    ),
    col(
        "first_seen_ns",
        "roce.first_seen",
        ChType::UInt64,
        "Its first packet in the interval, Unix-epoch ns (from the sidecar: the interval's start when it had packets before)",
        |r| Value::U64(r.flow.first_seen_ns),
    ),
    col(
        "last_seen_ns",
        "roce.last_seen",
        ChType::UInt64,
        "Its last packet in the interval, Unix-epoch ns (from the sidecar: a packet counted while the drain read may be a little after the interval's end)",
        |r| Value::U64(r.flow.last_seen_ns),
    ),
];

const fn concat_columns<G: Copy, const A: usize, const B: usize, const N: usize>(
    a: [Column<G>; A],
    b: [Column<G>; B],
) -> [Column<G>; N] {
    assert!(A + B == N);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const QP_COLUMNS: [Column<QpGet>; 41] = concat_columns(QP_OWN, QP_OPS);

/// A QP's packets in one direction over the interval: a flow of the report.
pub const QP_INTERVALS: Table<QpGet> = Table {
    name: "qp_intervals",
    row: "a QP's packets in one direction (source, destination, UDP source port, destination QP) over one interval",
    order_by: "(host, src_addr, dst_addr, dest_qp, src_port, interval_start_ns)",
    columns: &QP_COLUMNS,
};

pub type SideGet = for<'r> fn(&SideItem<'r>) -> Value<'r>;

fn side_ops<'r>(r: &SideItem<'r>) -> &'r Ops {
    &r.this.ops
}

fn latency_value(l: &Option<LatencySummary>, f: fn(&LatencySummary) -> u64) -> Value<'static> {
    Value::U64(l.as_ref().map_or(0, f))
}

const SIDE_OPS: [Column<SideGet>; 11] = ops_columns!(SideGet, "ops_", "ops", side_ops);

const SIDE_OWN: [Column<SideGet>; 34] = [
    col(
        "transport",
        "roce.transport",
        ChType::Label,
        "RC, UC, XRC, or UD",
        |r| Value::str(&r.connection.transport),
    ),
    col(
        "side",
        "roce.connection.side",
        ChType::Label,
        "a or b: which end of the connection this row is",
        |r| Value::str(r.side),
    ),
    col(
        "addr",
        "source.address",
        ChType::String,
        "This side's IP address",
        |r| ip(&r.this.ip),
    ),
    col(
        "qp",
        "rdma.qp",
        ChType::UInt32,
        "This side's QP (the peer's packets name it), or 0 when unknown",
        |r| Value::U64(r.this.qp.unwrap_or(0).into()),
    ),
    col(
        "peer_addr",
        "destination.address",
        ChType::String,
        "The peer's IP address",
        |r| ip(&r.peer.ip),
    ),
    col(
        "peer_qp",
        "rdma.qp.peer",
        ChType::UInt32,
        "The peer's QP, or 0 when unknown",
        |r| Value::U64(r.peer.qp.unwrap_or(0).into()),
    ),
    col(
        "ports",
        "roce.udp.source_ports",
        ChType::UInt64s,
        "The UDP source ports this side sent from",
        |r| Value::U64s(Nums::U16(&r.this.ports)),
    ),
    col(
        "qp_pid",
        "roce.qp.pid",
        ChType::UInt32,
        "The process that owns this side's QP, when the QP is the exporter host's and its QP table names it (0: not known)",
        |r| Value::U64(r.process.and_then(|q| q.pid).map_or(0, u64::from)),
    ),
    col(
        "qp_job",
        "roce.qp.job.id",
        ChType::Label,
        "That process's training job, as its launcher's environment names it, or empty",
        |r| {
            Value::str(
                r.process
                    .and_then(|q| q.job.as_ref())
                    .and_then(|j| j.job.as_deref())
                    .unwrap_or_default(),
            )
        },
    ),
    col(
        "qp_rank",
        "roce.qp.job.rank",
        ChType::Label,
        "That process's rank in its job, as its environment tells it, or empty",
        |r| match r.process.and_then(|q| q.job.as_ref()).and_then(|j| j.rank) {
            Some(rank) => Value::str(rank.to_string()),
            None => Value::str(""),
        },
    ),
    col(
        "paired_by",
        "roce.connection.paired_by",
        ChType::Label,
        "How the two directions were paired (connection manager, QP numbers...), or empty",
        |r| Value::str(r.connection.paired_by.as_deref().unwrap_or_default()),
    ),
    col(
        "packets",
        "roce.packets",
        ChType::Count,
        "Packets this side sent",
        |r| Value::U64(r.this.packets),
    ),
    col(
        "bytes",
        "roce.bytes",
        ChType::Count,
        "Bytes this side sent (IP length)",
        |r| Value::U64(r.this.bytes),
    ),
    col(
        "ce",
        "roce.ecn.ce",
        ChType::Count,
        "This side's packets marked CE",
        |r| Value::U64(r.this.ce),
    ),
    col(
        "psn_missing",
        "roce.psn.missing",
        ChType::Count,
        "PSNs of this side's requests confirmed lost",
        |r| Value::U64(r.this.psn.missing),
    ),
    col(
        "psn_out_of_order",
        "roce.psn.out_of_order",
        ChType::Count,
        "PSNs of this side's requests that came late",
        |r| Value::U64(r.this.psn.out_of_order),
    ),
    col(
        "psn_duplicates",
        "roce.psn.duplicates",
        ChType::Count,
        "Copies of this side's PSNs seen before at this point",
        |r| Value::U64(r.this.psn.duplicates),
    ),
    col(
        "psn_retransmissions",
        "roce.psn.retransmissions",
        ChType::Count,
        "Request PSNs this side sent again",
        |r| Value::U64(r.this.psn.retransmissions),
    ),
    col(
        "psn_resets",
        "roce.psn.resets",
        ChType::Count,
        "Restarts of this side's PSN analysis",
        |r| Value::U64(r.this.psn.resets),
    ),
    col(
        "psn_violations",
        "roce.psn.violations",
        ChType::Count,
        "PSN behaviour no transport allows",
        |r| Value::U64(r.this.psn.violations),
    ),
    col(
        "messages",
        "roce.messages",
        ChType::Count,
        "Messages this side completed (SEND, WRITE, READ)",
        |r| Value::U64(r.this.messages.as_ref().map_or(0, |m| m.count)),
    ),
    col(
        "message_bytes",
        "roce.messages.bytes",
        ChType::Count,
        "Bytes of the messages of known size",
        |r| Value::U64(r.this.messages.as_ref().map_or(0, |m| m.bytes)),
    ),
    col(
        "messages_unknown_size",
        "roce.messages.unknown_size",
        ChType::Count,
        "Messages whose size the wire did not show",
        |r| Value::U64(r.this.messages.as_ref().map_or(0, |m| m.unknown_size)),
    ),
    col(
        "ack_samples",
        "roce.latency.ack.samples",
        ChType::Count,
        "ACK latency samples of this side's requests",
        |r| latency_value(&r.this.latency.ack, |l| l.samples),
    ),
    col(
        "ack_p50_ns",
        "roce.latency.ack.p50",
        ChType::Count,
        "Median ACK latency, ns (0: no sample)",
        |r| latency_value(&r.this.latency.ack, |l| l.p50_ns),
    ),
    col(
        "ack_p99_ns",
        "roce.latency.ack.p99",
        ChType::Count,
        "99th percentile ACK latency, ns",
        |r| latency_value(&r.this.latency.ack, |l| l.p99_ns),
    ),
    col(
        "ack_max_ns",
        "roce.latency.ack.max",
        ChType::Count,
        "Largest ACK latency, ns",
        |r| latency_value(&r.this.latency.ack, |l| l.max_ns),
    ),
    col(
        "read_samples",
        "roce.latency.read.samples",
        ChType::Count,
        "READ latency samples (request to first response) of this side's READs",
        |r| latency_value(&r.this.latency.read, |l| l.samples),
    ),
    col(
        "read_p50_ns",
        "roce.latency.read.p50",
        ChType::Count,
        "Median READ latency, ns",
        |r| latency_value(&r.this.latency.read, |l| l.p50_ns),
    ),
    col(
        "read_p99_ns",
        "roce.latency.read.p99",
        ChType::Count,
        "99th percentile READ latency, ns",
        |r| latency_value(&r.this.latency.read, |l| l.p99_ns),
    ),
    col(
        "pmtu",
        "roce.pmtu",
        ChType::UInt32,
        "The connection's path MTU (0: not seen)",
        |r| Value::U64(r.connection.pmtu.unwrap_or(0).into()),
    ),
    col(
        "connection_src_port",
        "roce.connection.source_port",
        ChType::UInt16,
        "The connection's UDP source port (the first side's, when both use one)",
        |r| Value::U64(r.connection.udp_src_port.into()),
    ),
    col(
        "first_seen_ns",
        "roce.first_seen",
        ChType::UInt64,
        "The connection's first packet, Unix-epoch ns",
        |r| Value::U64(r.connection.first_seen_ns),
    ),
    col(
        "last_seen_ns",
        "roce.last_seen",
        ChType::UInt64,
        "The connection's last packet, Unix-epoch ns",
        |r| Value::U64(r.connection.last_seen_ns),
    ),
];

const SIDE_COLUMNS: [Column<SideGet>; 45] = concat_columns(SIDE_OWN, SIDE_OPS);

/// One side of a connection over the interval: a QP with its messages and latency.
pub const CONNECTION_SIDES: Table<SideGet> = Table {
    name: "connection_sides",
    row: "one side of a connection (a QP and what both directions show of it) over one interval; a side seen in none of its columns (the far end of a direction seen alone: no flow it sent, no message, no request of its timed) has no row, its peer's row names it",
    order_by: "(host, addr, peer_addr, qp, interval_start_ns)",
    columns: &SIDE_COLUMNS,
};

pub type BucketGet = for<'r> fn(&BucketItem<'r>) -> Value<'r>;

/// One bucket of a latency histogram.
pub const LATENCY_BUCKETS: Table<BucketGet> = Table {
    name: "latency_buckets",
    row: "one bucket of a latency histogram, of a connection side or of an interface, over one interval",
    order_by: "(host, scope, kind, addr, qp, lo_ns, interval_start_ns)",
    columns: &[
        col(
            "scope",
            "roce.latency.scope",
            ChType::Label,
            "connection (a side's requests) or interface (all requests seen there)",
            |r| Value::str(r.scope),
        ),
        col(
            "interface",
            "network.interface.name",
            ChType::Label,
            "The interface (interface scope), or empty",
            |r| Value::str(r.interface),
        ),
        col(
            "kind",
            "roce.latency.kind",
            ChType::Label,
            "ack (request to its ACK) or read (READ request to its first response)",
            |r| Value::str(r.kind),
        ),
        col(
            "side",
            "roce.latency.side",
            ChType::Label,
            "The connection side whose requests were timed (a, b), or the interface's side",
            |r| Value::str(r.side),
        ),
        col(
            "addr",
            "source.address",
            ChType::String,
            "The requester's IP address (connection scope), or empty",
            |r| {
                r.connection
                    .map_or(Value::str(""), |(_, this, _)| ip(&this.ip))
            },
        ),
        col(
            "qp",
            "rdma.qp",
            ChType::UInt32,
            "The requester's QP (connection scope), or 0",
            |r| {
                Value::U64(
                    r.connection
                        .and_then(|(_, this, _)| this.qp)
                        .unwrap_or(0)
                        .into(),
                )
            },
        ),
        col(
            "peer_addr",
            "destination.address",
            ChType::String,
            "The responder's IP address (connection scope), or empty",
            |r| {
                r.connection
                    .map_or(Value::str(""), |(_, _, peer)| ip(&peer.ip))
            },
        ),
        col(
            "peer_qp",
            "rdma.qp.peer",
            ChType::UInt32,
            "The responder's QP (connection scope), or 0",
            |r| {
                Value::U64(
                    r.connection
                        .and_then(|(_, _, peer)| peer.qp)
                        .unwrap_or(0)
                        .into(),
                )
            },
        ),
        col(
            "lo_ns",
            "roce.latency.bucket.low",
            ChType::UInt64,
            "The bucket's lower bound, ns (inclusive)",
            |r| Value::U64(r.bucket.lo_ns),
        ),
        col(
            "hi_ns",
            "roce.latency.bucket.high",
            ChType::UInt64,
            "The bucket's upper bound, ns (exclusive)",
            |r| Value::U64(r.bucket.hi_ns),
        ),
        col(
            "count",
            "roce.latency.bucket.count",
            ChType::Count,
            "Samples in the bucket",
            |r| Value::U64(r.bucket.count),
        ),
    ],
};

pub type PauseGet = for<'r> fn(&PauseItem<'r>) -> Value<'r>;

/// PAUSE / PFC frames of one source and priority.
pub const PAUSES: Table<PauseGet> = Table {
    name: "pauses",
    row: "the PAUSE / PFC frames of one source MAC and priority over one interval",
    order_by: "(host, src_mac, priority, interval_start_ns)",
    columns: &[
        col(
            "src_mac",
            "roce.pause.source_mac",
            ChType::String,
            "The MAC address that sent the frames (the paused link's far end)",
            |r| Value::str(&r.source.src_mac),
        ),
        col(
            "direction",
            "network.io.direction",
            ChType::Label,
            "receive or transmit",
            |r| direction(r.source.direction),
        ),
        col(
            "vantage",
            "roce.vantage",
            ChType::Label,
            "host or mirror",
            |r| {
                Value::str(if r.source.mirror.is_some() {
                    "mirror"
                } else {
                    "host"
                })
            },
        ),
        col(
            "priority",
            "roce.pause.priority",
            ChType::UInt8,
            "The PFC priority, or 255 for an 802.3x PAUSE (every priority)",
            |r| Value::U64(r.priority.into()),
        ),
        col(
            "frames",
            "roce.pause.frames",
            ChType::Count,
            "Frames that paused it (non-zero time)",
            |r| Value::U64(r.counts.frames),
        ),
        col(
            "xon",
            "roce.pause.xon",
            ChType::Count,
            "Frames that resumed it (zero time)",
            |r| Value::U64(r.counts.xon),
        ),
        col(
            "quanta",
            "roce.pause.quanta",
            ChType::Count,
            "Pause quanta asked for, summed (512 bit times each)",
            |r| Value::U64(r.counts.quanta),
        ),
        col(
            "pause_ns",
            "roce.pause.time",
            ChType::Count,
            "Time paused, ns, at the link speed (0: the speed is not known)",
            |r| Value::U64(r.counts.pause_ns.unwrap_or(0)),
        ),
    ],
};

pub type FindingGet = for<'r> fn(&FindingItem<'r>) -> Value<'r>;

/// A finding of the interval.
pub const FINDINGS: Table<FindingGet> = Table {
    name: "findings",
    row: "a finding of the interval, with its evidence",
    order_by: "(host, rule, interval_start_ns)",
    columns: &[
        col(
            "rule",
            "roce.finding.rule",
            ChType::Label,
            "The rule (docs/findings.md)",
            |r| Value::str(&r.finding.rule),
        ),
        col(
            "severity",
            "roce.finding.severity",
            ChType::Label,
            "info, warning or critical",
            |r| Value::str(r.finding.severity.name()),
        ),
        col(
            "title",
            "roce.finding.title",
            ChType::String,
            "The finding in a line",
            |r| Value::str(&r.finding.title),
        ),
        col(
            "summary",
            "roce.finding.summary",
            ChType::String,
            "What the evidence shows",
            |r| Value::str(&r.finding.summary),
        ),
        col(
            "evidence",
            "roce.finding.evidence",
            ChType::String,
            "The evidence, a JSON object",
            |r| Value::str(serde_json::to_string(&r.finding.evidence).unwrap_or_default()),
        ),
        col(
            "flows",
            "roce.finding.flows",
            ChType::Strings,
            "The flows it names: source:port ([v6]:port) > destination QP n",
            |r| {
                Value::Strs(Cow::Owned(
                    r.finding
                        .flows
                        .iter()
                        .map(|f| {
                            let from = std::net::SocketAddr::new(f.src_ip, f.udp_src_port);
                            format!("{from} > {} QP {}", f.dst_ip, f.dest_qp)
                        })
                        .collect(),
                ))
            },
        ),
        col(
            "hint",
            "roce.finding.hint",
            ChType::String,
            "What to look at next",
            |r| Value::str(&r.finding.hint),
        ),
    ],
};

pub type IntervalGet = fn(&IntervalItem) -> Value<'static>;

/// One row per interval, after its other rows: how many rows of each table it has, so that a
/// receiver tells an interval with no rows of a table from one whose rows were lost.
pub const INTERVALS: Table<IntervalGet> = Table {
    name: "intervals",
    row: "an interval: the rows it has in each table",
    order_by: "(host, exporter, interval_seq)",
    columns: &[
        col(
            "qp_rows",
            "roce.rows.qp_intervals",
            ChType::Count,
            "Its rows of qp_intervals",
            |r| Value::U64(r.rows[0]),
        ),
        col(
            "connection_side_rows",
            "roce.rows.connection_sides",
            ChType::Count,
            "Its rows of connection_sides",
            |r| Value::U64(r.rows[1]),
        ),
        col(
            "latency_bucket_rows",
            "roce.rows.latency_buckets",
            ChType::Count,
            "Its rows of latency_buckets",
            |r| Value::U64(r.rows[2]),
        ),
        col(
            "pause_rows",
            "roce.rows.pauses",
            ChType::Count,
            "Its rows of pauses",
            |r| Value::U64(r.rows[3]),
        ),
        col(
            "finding_rows",
            "roce.rows.findings",
            ChType::Count,
            "Its rows of findings",
            |r| Value::U64(r.rows[4]),
        ),
    ],
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_head_is_the_exporters_columns_and_the_rows_own() {
        let own: Vec<&str> = HEAD
            .iter()
            .map(|c| c.info.name)
            .filter(|n| !EXPORTER_COLUMNS.contains(n))
            .collect();
        assert_eq!(
            own,
            [
                "interval_seq",
                "seq",
                "interval_start_ns",
                "interval_end_ns"
            ]
        );
        for n in EXPORTER_COLUMNS {
            assert!(HEAD.iter().any(|c| c.info.name == n), "{n}");
        }
    }

    #[test]
    fn names_and_attributes_are_unique_in_each_table() {
        for t in tables() {
            let names: BTreeSet<_> = t.columns.iter().map(|c| c.name).collect();
            assert_eq!(names.len(), t.columns.len(), "{}: column names", t.name);
            let attributes: BTreeSet<_> = t.columns.iter().map(|c| c.attribute).collect();
            assert_eq!(attributes.len(), t.columns.len(), "{}: attributes", t.name);
            for c in &t.columns {
                assert!(
                    c.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{}: {}",
                    t.name,
                    c.name
                );
                assert!(!c.help.is_empty(), "{}: {}", t.name, c.name);
            }
        }
    }
}
