//! The NIC sources' answers: what a reader found, or why it found nothing.

use roce_observer::source::nic::Availability;

/// What was found; panics when the source is absent, with the reason.
pub fn present<T: std::fmt::Debug>(a: Availability<T>) -> T {
    match a {
        Availability::Present(t) => t,
        Availability::Absent { reason } => panic!("absent: {reason}"),
    }
}

/// Why the source is absent; panics when it is present, with what was found.
pub fn absent<T: std::fmt::Debug>(a: Availability<T>) -> String {
    match a {
        Availability::Absent { reason } => reason,
        Availability::Present(t) => panic!("present: {t:?}"),
    }
}
