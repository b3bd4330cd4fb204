//! The daemon's metric registry against what else names metrics: docs/sidecar.md's table of
//! every family and the tests' lists (the scrapes are checked against it where they are taken:
//! `tests/privileged/sidecar.rs`, `tests/privileged/capture_live.rs`). No privileges needed.

/// docs/sidecar.md's table of every family is the registry's (`UPDATE_DOCS=1` writes it), and
/// the tests' own lists name registry families only.
#[test]
fn the_docs_and_the_tests_lists_follow_the_metric_registry() {
    integration_tests::generated_file(
        "docs/sidecar.md",
        Some(("<!-- metrics:begin -->\n", "<!-- metrics:end -->")),
        &observer_daemon::metrics::reference_table(),
        "the metric registry",
        "metrics_registry",
    );
    for list in [
        integration_tests::EXPORTED_METRICS,
        integration_tests::NIC_METRICS,
        integration_tests::NIC_ONLY_METRICS,
        integration_tests::PFC_METRICS,
        integration_tests::LATENCY_METRICS,
    ] {
        for name in list {
            assert!(
                integration_tests::registry_family(name).is_some(),
                "{name}: no family of the metric registry"
            );
        }
    }
    // Names are unique once exposed.
    let all: Vec<String> = observer_daemon::metrics::all()
        .into_iter()
        .flat_map(|(_, f)| f)
        .map(|f| f.exposed())
        .collect();
    let unique: std::collections::BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a family declared twice");
}
