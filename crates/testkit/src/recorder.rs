//! A record of an authority's lifecycle, for tests that check the order of its steps.

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::patterns::authority::{Event, Observer};

/// Records the [`Event`]s of one or more authorities, each under a label, in the order they
/// happened (events arrive synchronously, on the thread where they happen, so the order is
/// the real one). Clones share the record.
#[derive(Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<(String, Event)>>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// An observer that records under `label` (give it to `Authority::with_observer` or
    /// `Registry::with_files`).
    pub fn observer(&self, label: &str) -> Observer {
        let events = self.events.clone();
        let label = label.to_string();
        Arc::new(move |e: &Event| {
            events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((label.clone(), e.clone()))
        })
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<(String, Event)> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
