//! Which addresses answer each target's names now: the proxy's (relay) or the ingress
//! controller Service's own (direct), or none (skip). The controller picks (`answer=`, and for
//! `auto` the header verdict); the writers read the pick when they resolve a target's
//! addresses, so a changed pick reaches DNS through the next write, the same single write as
//! any other change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::target::Target;

use crate::header_verdict::Route;

/// The picks, shared by the controller and the writers. A target without one is relayed (what
/// ouroboros did before picks existed).
#[derive(Clone, Debug, Default)]
pub struct Routes(Arc<Mutex<BTreeMap<Target, (Route, String)>>>);

impl Routes {
    /// Sets `target`'s pick and why; whether the route changed.
    pub fn set(&self, target: Target, route: Route, why: String) -> bool {
        let mut m = self.0.lock().expect("routes lock");
        let before = m.insert(target, (route, why)).map(|(r, _)| r);
        before != Some(route)
    }

    pub fn get(&self, target: Target) -> Route {
        self.0
            .lock()
            .expect("routes lock")
            .get(&target)
            .map_or(Route::Relay, |(r, _)| *r)
    }

    /// The targets whose names are left out.
    pub fn skipped(&self) -> BTreeSet<Target> {
        let m = self.0.lock().expect("routes lock");
        m.iter()
            .filter(|(_, (r, _))| *r == Route::Skip)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Every pick with its reason.
    pub fn snapshot(&self) -> BTreeMap<Target, (Route, String)> {
        self.0.lock().expect("routes lock").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_default_to_relay_and_report_changes() {
        let r = Routes::default();
        assert_eq!(r.get(Target::Default), Route::Relay);
        assert!(
            r.set(Target::Default, Route::Relay, "a".into()),
            "a first pick is a change"
        );
        assert!(r.set(Target::Named(0), Route::Direct, "b".into()));
        assert!(
            !r.set(Target::Named(0), Route::Direct, "c".into()),
            "same route"
        );
        assert!(r.set(Target::Named(1), Route::Skip, "d".into()));
        assert_eq!(r.get(Target::Named(0)), Route::Direct);
        assert_eq!(r.skipped(), [Target::Named(1)].into());
        assert_eq!(r.snapshot()[&Target::Named(0)].1, "c");
    }
}
