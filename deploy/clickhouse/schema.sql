-- roce-observer fleet records, schema version 1 (docs/export.md).
-- Generated from the record tables (tests/export.rs checks this file against them).
CREATE DATABASE IF NOT EXISTS roce;

-- One row: a QP's packets in one direction (source, destination, UDP source port, destination QP) over one interval.
CREATE TABLE IF NOT EXISTS roce.qp_intervals
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    direction LowCardinality(String) COMMENT 'receive or transmit (host mode''s TC egress), as the observation point saw it',
    vantage LowCardinality(String) COMMENT 'host (the packets themselves) or mirror (copies through a mirror session)',
    mirror_session LowCardinality(String) COMMENT 'The ERSPAN session ID of mirror copies, or the encapsulation without one, or empty',
    src_addr String COMMENT 'Source IP address',
    dst_addr String COMMENT 'Destination IP address',
    src_port UInt16 COMMENT 'UDP source port (the ECMP entropy; the destination port is 4791)',
    dest_qp UInt32 COMMENT 'BTH destination QP',
    transports Array(String) COMMENT 'The transports of its opcodes (RC, UC, UD, XRC, CNP...)',
    packets UInt64 COMMENT 'RoCEv2 packets',
    bytes UInt64 COMMENT 'RoCEv2 bytes (IP length)',
    ecn_not_ect UInt64 COMMENT 'Packets with ECN Not-ECT',
    ecn_ect0 UInt64 COMMENT 'Packets with ECN ECT(0)',
    ecn_ect1 UInt64 COMMENT 'Packets with ECN ECT(1)',
    ce UInt64 COMMENT 'Packets marked CE (congestion experienced)',
    psn_gaps UInt64 COMMENT 'Request PSNs ahead of the expected one (each opened a hole: loss or reordering)',
    psn_missing UInt64 COMMENT 'PSNs confirmed lost (their hole left the analysis window unfilled)',
    psn_regressions UInt64 COMMENT 'Request PSNs behind the expected one',
    psn_out_of_order UInt64 COMMENT 'PSNs that filled a hole late (reordering, not loss)',
    psn_duplicates UInt64 COMMENT 'Copies of a PSN seen before at this point (a second tap, a mirror twice)',
    psn_retransmissions UInt64 COMMENT 'Request PSNs sent again (go-back-N runs, resends after a timeout or RNR wait)',
    psn_retransmission_episodes UInt64 COMMENT 'Resend episodes (one go-back-N run is one)',
    psn_lost_events UInt64 COMMENT 'Loss events (a hole confirmed lost, however many PSNs)',
    psn_resets UInt64 COMMENT 'Restarts of the PSN analysis (a QP number used again by a new connection)',
    psn_violations UInt64 COMMENT 'PSN behaviour no transport allows (verified against the responder''s answers)',
    nak_seq_errors UInt64 COMMENT 'NAKs with the PSN sequence error code',
    pmtu UInt32 COMMENT 'The path MTU its FIRST and MIDDLE packets show (0: not seen)',
    dscp Array(UInt64) COMMENT 'The DSCP values its packets carried',
    vlans Array(UInt64) COMMENT 'The VLAN IDs (outer tag) its packets carried',
    first_seen_ns UInt64 COMMENT 'Its first packet in the interval, Unix-epoch ns (from the sidecar: the interval''s start when it had packets before)',
    last_seen_ns UInt64 COMMENT 'Its last packet in the interval, Unix-epoch ns (from the sidecar: a packet counted while the drain read may be a little after the interval''s end)',
    ops_send UInt64 COMMENT 'SEND packets',
    ops_write UInt64 COMMENT 'RDMA WRITE packets',
    ops_read_request UInt64 COMMENT 'RDMA READ requests',
    ops_read_response UInt64 COMMENT 'RDMA READ response packets',
    ops_ack UInt64 COMMENT 'ACKs',
    ops_nak UInt64 COMMENT 'NAKs (PSN sequence error and the other NAK codes)',
    ops_rnr_nak UInt64 COMMENT 'RNR NAKs (receiver not ready)',
    ops_atomic UInt64 COMMENT 'Atomic requests',
    ops_atomic_ack UInt64 COMMENT 'Atomic ACKs',
    ops_cnp UInt64 COMMENT 'Congestion notification packets (CNP)',
    ops_other UInt64 COMMENT 'Other opcodes (reserved, vendor, unknown AETH codes)',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, src_addr, dst_addr, dest_qp, src_port, interval_start_ns)
TTL inserted_at + INTERVAL 30 DAY DELETE;

-- One row: one side of a connection (a QP and what both directions show of it) over one interval; a side seen in none of its columns (the far end of a direction seen alone: no flow it sent, no message, no request of its timed) has no row, its peer's row names it.
CREATE TABLE IF NOT EXISTS roce.connection_sides
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    transport LowCardinality(String) COMMENT 'RC, UC, XRC, or UD',
    side LowCardinality(String) COMMENT 'a or b: which end of the connection this row is',
    addr String COMMENT 'This side''s IP address',
    qp UInt32 COMMENT 'This side''s QP (the peer''s packets name it), or 0 when unknown',
    peer_addr String COMMENT 'The peer''s IP address',
    peer_qp UInt32 COMMENT 'The peer''s QP, or 0 when unknown',
    ports Array(UInt64) COMMENT 'The UDP source ports this side sent from',
    qp_pid UInt32 COMMENT 'The process that owns this side''s QP, when the QP is the exporter host''s and its QP table names it (0: not known)',
    qp_job LowCardinality(String) COMMENT 'That process''s training job, as its launcher''s environment names it, or empty',
    qp_rank LowCardinality(String) COMMENT 'That process''s rank in its job, as its environment tells it, or empty',
    paired_by LowCardinality(String) COMMENT 'How the two directions were paired (connection manager, QP numbers...), or empty',
    packets UInt64 COMMENT 'Packets this side sent',
    bytes UInt64 COMMENT 'Bytes this side sent (IP length)',
    ce UInt64 COMMENT 'This side''s packets marked CE',
    psn_missing UInt64 COMMENT 'PSNs of this side''s requests confirmed lost',
    psn_out_of_order UInt64 COMMENT 'PSNs of this side''s requests that came late',
    psn_duplicates UInt64 COMMENT 'Copies of this side''s PSNs seen before at this point',
    psn_retransmissions UInt64 COMMENT 'Request PSNs this side sent again',
    psn_resets UInt64 COMMENT 'Restarts of this side''s PSN analysis',
    psn_violations UInt64 COMMENT 'PSN behaviour no transport allows',
    messages UInt64 COMMENT 'Messages this side completed (SEND, WRITE, READ)',
    message_bytes UInt64 COMMENT 'Bytes of the messages of known size',
    messages_unknown_size UInt64 COMMENT 'Messages whose size the wire did not show',
    ack_samples UInt64 COMMENT 'ACK latency samples of this side''s requests',
    ack_p50_ns UInt64 COMMENT 'Median ACK latency, ns (0: no sample)',
    ack_p99_ns UInt64 COMMENT '99th percentile ACK latency, ns',
    ack_max_ns UInt64 COMMENT 'Largest ACK latency, ns',
    read_samples UInt64 COMMENT 'READ latency samples (request to first response) of this side''s READs',
    read_p50_ns UInt64 COMMENT 'Median READ latency, ns',
    read_p99_ns UInt64 COMMENT '99th percentile READ latency, ns',
    pmtu UInt32 COMMENT 'The connection''s path MTU (0: not seen)',
    connection_src_port UInt16 COMMENT 'The connection''s UDP source port (the first side''s, when both use one)',
    first_seen_ns UInt64 COMMENT 'The connection''s first packet, Unix-epoch ns',
    last_seen_ns UInt64 COMMENT 'The connection''s last packet, Unix-epoch ns',
    ops_send UInt64 COMMENT 'SEND packets',
    ops_write UInt64 COMMENT 'RDMA WRITE packets',
    ops_read_request UInt64 COMMENT 'RDMA READ requests',
    ops_read_response UInt64 COMMENT 'RDMA READ response packets',
    ops_ack UInt64 COMMENT 'ACKs',
    ops_nak UInt64 COMMENT 'NAKs (PSN sequence error and the other NAK codes)',
    ops_rnr_nak UInt64 COMMENT 'RNR NAKs (receiver not ready)',
    ops_atomic UInt64 COMMENT 'Atomic requests',
    ops_atomic_ack UInt64 COMMENT 'Atomic ACKs',
    ops_cnp UInt64 COMMENT 'Congestion notification packets (CNP)',
    ops_other UInt64 COMMENT 'Other opcodes (reserved, vendor, unknown AETH codes)',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, addr, peer_addr, qp, interval_start_ns)
TTL inserted_at + INTERVAL 30 DAY DELETE;

-- One row: one bucket of a latency histogram, of a connection side or of an interface, over one interval.
CREATE TABLE IF NOT EXISTS roce.latency_buckets
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    scope LowCardinality(String) COMMENT 'connection (a side''s requests) or interface (all requests seen there)',
    interface LowCardinality(String) COMMENT 'The interface (interface scope), or empty',
    kind LowCardinality(String) COMMENT 'ack (request to its ACK) or read (READ request to its first response)',
    side LowCardinality(String) COMMENT 'The connection side whose requests were timed (a, b), or the interface''s side',
    addr String COMMENT 'The requester''s IP address (connection scope), or empty',
    qp UInt32 COMMENT 'The requester''s QP (connection scope), or 0',
    peer_addr String COMMENT 'The responder''s IP address (connection scope), or empty',
    peer_qp UInt32 COMMENT 'The responder''s QP (connection scope), or 0',
    lo_ns UInt64 COMMENT 'The bucket''s lower bound, ns (inclusive)',
    hi_ns UInt64 COMMENT 'The bucket''s upper bound, ns (exclusive)',
    count UInt64 COMMENT 'Samples in the bucket',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, scope, kind, addr, qp, lo_ns, interval_start_ns)
TTL inserted_at + INTERVAL 30 DAY DELETE;

-- One row: the PAUSE / PFC frames of one source MAC and priority over one interval.
CREATE TABLE IF NOT EXISTS roce.pauses
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    src_mac String COMMENT 'The MAC address that sent the frames (the paused link''s far end)',
    direction LowCardinality(String) COMMENT 'receive or transmit',
    vantage LowCardinality(String) COMMENT 'host or mirror',
    priority UInt8 COMMENT 'The PFC priority, or 255 for an 802.3x PAUSE (every priority)',
    frames UInt64 COMMENT 'Frames that paused it (non-zero time)',
    xon UInt64 COMMENT 'Frames that resumed it (zero time)',
    quanta UInt64 COMMENT 'Pause quanta asked for, summed (512 bit times each)',
    pause_ns UInt64 COMMENT 'Time paused, ns, at the link speed (0: the speed is not known)',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, src_mac, priority, interval_start_ns)
TTL inserted_at + INTERVAL 30 DAY DELETE;

-- One row: a finding of the interval, with its evidence.
CREATE TABLE IF NOT EXISTS roce.findings
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    rule LowCardinality(String) COMMENT 'The rule (docs/findings.md)',
    severity LowCardinality(String) COMMENT 'info, warning or critical',
    title String COMMENT 'The finding in a line',
    summary String COMMENT 'What the evidence shows',
    evidence String COMMENT 'The evidence, a JSON object',
    flows Array(String) COMMENT 'The flows it names: source:port ([v6]:port) > destination QP n',
    hint String COMMENT 'What to look at next',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, rule, interval_start_ns)
TTL inserted_at + INTERVAL 30 DAY DELETE;

-- One row: an interval: the rows it has in each table.
CREATE TABLE IF NOT EXISTS roce.intervals
(
    schema_version UInt16 COMMENT 'The record schema''s version',
    exporter LowCardinality(String) COMMENT 'The exporter''s stream: host, process and start; its sequence numbers count from 0',
    interval_seq UInt64 COMMENT 'The exporter''s interval number, 0, 1, 2... (a gap: an interval lost)',
    seq UInt64 COMMENT 'The row''s number among the exporter''s rows of this table, 0, 1, 2... (a gap: a row lost)',
    interval_start_ns UInt64 COMMENT 'Start of the interval, Unix-epoch ns',
    interval_end_ns UInt64 COMMENT 'End of the interval, Unix-epoch ns',
    host LowCardinality(String) COMMENT 'The host the exporter runs on',
    rdma_device LowCardinality(String) COMMENT 'The RDMA devices of the host''s NIC side the report read, comma separated, or empty',
    observed LowCardinality(String) COMMENT 'The interfaces (XDP, libpcap) or capture files observed, comma separated',
    source LowCardinality(String) COMMENT 'How frames were read: live (XDP), capture (libpcap), pcap (files), nic (the NIC side alone)',
    job LowCardinality(String) COMMENT 'The training jobs of the host''s processes that own RC QPs, from their launchers'' variables, comma separated (empty: not known)',
    rank LowCardinality(String) COMMENT 'The ranks of the host''s processes that own RC QPs, from their environments: 0-3,8 (empty: not known)',
    qp_rows UInt64 COMMENT 'Its rows of qp_intervals',
    connection_side_rows UInt64 COMMENT 'Its rows of connection_sides',
    latency_bucket_rows UInt64 COMMENT 'Its rows of latency_buckets',
    pause_rows UInt64 COMMENT 'Its rows of pauses',
    finding_rows UInt64 COMMENT 'Its rows of findings',
    interval_start DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns)),
    inserted_at DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (host, exporter, interval_seq)
TTL inserted_at + INTERVAL 30 DAY DELETE;
