//! The sidecar's exported metric names, and its expositions parsed by the reference parser.

use std::{collections::BTreeMap, process::Command};

/// One sample as the parser saw it.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses an exposition with prometheus_client's OpenMetrics parser (strict: `# EOF`, types,
/// units, counter names) or its Prometheus text parser.
pub fn parse_exposition(text: &str, openmetrics: bool) -> Vec<Sample> {
    let module = if openmetrics {
        "prometheus_client.openmetrics.parser"
    } else {
        "prometheus_client.parser"
    };
    let script = format!(
        "import sys, json\nfrom {module} import text_string_to_metric_families\nout = []\nfor fam in text_string_to_metric_families(sys.stdin.read()):\n    for s in fam.samples:\n        out.append([s.name, s.labels, s.value])\nprint(json.dumps(out))\n"
    );
    let out = crate::run_with_input(
        Command::new(crate::venv_python()).args(["-c", &script]),
        text.as_bytes(),
    )
    .expect("run the Python parser");
    assert!(
        out.status.success(),
        "the parser rejected the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Sample {
            name: s[0].as_str().unwrap().to_string(),
            labels: s[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            value: s[2].as_f64().unwrap(),
        })
        .collect()
}

/// The registry's families by the name a scrape shows.
fn registry() -> BTreeMap<String, observer_daemon::metrics::Family> {
    observer_daemon::metrics::all()
        .into_iter()
        .flat_map(|(_, f)| f)
        .map(|f| (f.exposed(), f))
        .collect()
}

/// The family of a sample name in `families` (a histogram's `_bucket`, `_count` and `_sum`
/// samples belong to it), and the labels the sample may carry beyond the family's (`le`).
fn family_in<'a>(
    families: &'a BTreeMap<String, observer_daemon::metrics::Family>,
    sample: &str,
) -> Option<(
    &'a observer_daemon::metrics::Family,
    &'static [&'static str],
)> {
    use observer_daemon::metrics::Kind;
    if let Some(f) = families.get(sample) {
        return Some((f, &[]));
    }
    for (suffix, extra) in [
        ("_bucket", &["le"][..]),
        ("_count", &[][..]),
        ("_sum", &[][..]),
    ] {
        if let Some(f) = sample.strip_suffix(suffix).and_then(|n| families.get(n))
            && f.kind == Kind::Histogram
        {
            return Some((f, extra));
        }
    }
    None
}

/// The registry's family of a sample name, and the labels the sample may carry beyond it.
pub fn registry_family(
    sample: &str,
) -> Option<(observer_daemon::metrics::Family, &'static [&'static str])> {
    let families = registry();
    family_in(&families, sample).map(|(f, extra)| (f.clone(), extra))
}

/// Every sample is of a family the registry declares, with exactly its labels: the encoder
/// exports nothing the registry does not say.
pub fn assert_in_registry(samples: &[Sample]) {
    let families = registry();
    for s in samples {
        let (f, extra) = family_in(&families, &s.name)
            .unwrap_or_else(|| panic!("{}: no family of the metric registry", s.name));
        let got: std::collections::BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
        let want: std::collections::BTreeSet<&str> =
            f.labels.iter().chain(extra).copied().collect();
        assert_eq!(got, want, "{}: labels against the registry's", s.name);
    }
}

/// Sum of the samples named `name` whose labels include `with`.
pub fn sample_sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> u64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
        .map(|s| s.value as u64)
        .sum()
}

/// Every sample name `roce-observer run` exports always (counters with their `_total`): the
/// sidecar test checks a scrape has exactly these, the deploy test that the rules and dashboard
/// use only these and the conditional ones below.
pub const EXPORTED_METRICS: &[&str] = &[
    // Per interface.
    "roce_iface_frames_total",
    "roce_iface_frame_bytes_total",
    "roce_packets_total",
    "roce_bytes_total",
    "roce_ecn_packets_total",
    "roce_op_packets_total",
    // Per queue pair (top K plus qp="rest").
    "roce_qp_packets_total",
    "roce_qp_bytes_total",
    "roce_qp_ce_packets_total",
    "roce_qp_cnp_packets_total",
    "roce_qp_nak_packets_total",
    "roce_qp_rnr_nak_packets_total",
    "roce_qp_psn_gaps_total",
    "roce_qp_psn_missing_total",
    "roce_qp_retransmissions_total",
    // The daemon itself.
    "roce_observer_info",
    "roce_observer_interface_attached",
    "roce_observer_interface_up",
    "roce_observer_reattachments_total",
    "roce_observer_drain_seconds",
    "roce_observer_drains_total",
    "roce_observer_flows_tracked",
    "roce_observer_flow_table_entries",
    "roce_observer_flow_table_capacity",
    "roce_observer_flow_table_fill_ratio",
    "roce_observer_flow_evictions_total",
    "roce_observer_unattributed_packets_total",
    "roce_observer_flows_aged_total",
    "roce_observer_spread_dropped_frames_total",
    "roce_observer_series",
    "roce_observer_max_series",
    "roce_observer_series_demotions_total",
    "roce_observer_cpu_seconds_total",
    "roce_observer_resident_memory_bytes",
    "roce_observer_kernel_map_memory_bytes",
    "roce_observer_skipped_frames_total",
    "roce_observer_config_reloads_total",
    "roce_observer_interval_seconds",
    "roce_observer_connections",
    // The NIC side's sources (rdma: 0 when no RDMA device is named or behind the interfaces).
    "roce_nic_source_up",
];

/// What `roce-observer run` exports once it reads an RDMA device's NIC side (its counters, and
/// the netdevs behind it).
pub const NIC_METRICS: &[&str] = &[
    "roce_nic_rdma_stat_total",
    // The fixture's IBTA counters, named as node_exporter's infiniband collector names them
    // (roce_nic_rdma_port_stat_total holds the others: the fixture has none).
    "roce_nic_infiniband_port_data_received_bytes_total",
    "roce_nic_infiniband_port_data_transmitted_bytes_total",
    "roce_nic_infiniband_port_packets_received_total",
    "roce_nic_infiniband_port_packets_transmitted_total",
    "roce_nic_ethtool_info",
    "roce_nic_pfc_pause_frames_total",
    "roce_nic_pfc_pause_seconds_total",
    "roce_nic_priority_discards_total",
    "roce_nic_class_discards_total",
    "roce_nic_pause_storm_events_total",
    "roce_nic_driver_stat_total",
    "roce_nic_info",
    "roce_nic_pfc_enabled",
    "roce_nic_mtu_bytes",
    "roce_nic_dcqcn_enabled",
    "roce_nic_queue_pairs",
    // The fixture's module (a CMIS QSFP112): read with the QP table.
    "roce_nic_module_info",
    "roce_nic_module_temperature_celsius",
    "roce_nic_module_voltage_volts",
    "roce_nic_module_tx_bias_amperes",
    "roce_nic_module_tx_power_watts",
    "roce_nic_module_rx_power_watts",
];

/// What `roce-observer run` exports of itself with the NIC side alone (nothing attached: no
/// wire family, not even at 0), besides [`NIC_METRICS`].
pub const NIC_ONLY_METRICS: &[&str] = &[
    "roce_observer_info",
    "roce_observer_drain_seconds",
    "roce_observer_drains_total",
    "roce_observer_interval_seconds",
    "roce_observer_cpu_seconds_total",
    "roce_observer_resident_memory_bytes",
    "roce_observer_config_reloads_total",
    "roce_nic_source_up",
];

/// What `roce-observer run` exports once PAUSE / PFC frames were seen on the wire (seconds:
/// where the link speed is known, host mode).
pub const PFC_METRICS: &[&str] = &[
    "roce_pfc_frames_total",
    "roce_pfc_xon_frames_total",
    "roce_pfc_pause_quanta_total",
    "roce_pfc_pause_seconds_total",
];

/// What `roce-observer run` exports once it has latency samples (histogram samples, per
/// interface and side, and per queue pair for the top-K series).
pub const LATENCY_METRICS: &[&str] = &[
    "roce_ack_latency_seconds_bucket",
    "roce_ack_latency_seconds_count",
    "roce_ack_latency_seconds_sum",
    "roce_read_latency_seconds_bucket",
    "roce_read_latency_seconds_count",
    "roce_read_latency_seconds_sum",
    "roce_qp_ack_latency_seconds_bucket",
    "roce_qp_ack_latency_seconds_count",
    "roce_qp_ack_latency_seconds_sum",
    "roce_qp_read_latency_seconds_bucket",
    "roce_qp_read_latency_seconds_count",
    "roce_qp_read_latency_seconds_sum",
];
