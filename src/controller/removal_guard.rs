//! The mass removal guard: a write that would remove most of the hostnames of the last write
//! (a filter typo, a source kind that stopped answering, an IngressClass renamed) is held, and
//! the old entries kept, until the same desired set has been seen for a hold time. A set that
//! keeps changing is never released early: each new set restarts the hold.
//!
//! Pure: the engine ([`super::sync`]) asks [`Guard::check`] before each write and acts on the
//! [`Verdict`]; time is passed in.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::hostname::Hostname;

/// When a write counts as a mass removal, and how long it is held.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// A write is held when it removes more than this share of the last write's hosts ...
    pub share: f64,
    /// ... and at least this many hosts.
    pub min: usize,
    /// How long the same desired set must be seen before it is written; zero turns the guard
    /// off.
    pub hold: Duration,
}

impl Policy {
    /// The defaults of the flags: more than half, at least 10 hosts, held 5 minutes.
    pub const DEFAULT: Policy = Policy {
        share: 0.5,
        min: 10,
        hold: Duration::from_secs(300),
    };

    /// Whether removing `removed` of the last write's `last` hosts is a mass removal.
    pub fn is_mass_removal(&self, removed: usize, last: usize) -> bool {
        !self.hold.is_zero() && removed >= self.min && removed as f64 > self.share * last as f64
    }
}

/// What the engine does with one desired set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not a mass removal (or no last write to compare with): write it.
    Apply,
    /// A mass removal: keep the last write. `fresh` is true the first time this set is held
    /// (report it once); `until` is when it is released if it stays the same.
    Hold {
        removed: usize,
        last: usize,
        until: Instant,
        fresh: bool,
    },
    /// The same set was held for the whole hold time: write it now.
    Release { removed: usize, last: usize },
}

/// The set being held and since when.
#[derive(Clone, Debug)]
struct Held {
    hosts: BTreeSet<Hostname>,
    since: Instant,
}

/// The guard's state across syncs.
#[derive(Debug)]
pub struct Guard {
    policy: Policy,
    held: Option<Held>,
}

impl Guard {
    pub fn new(policy: Policy) -> Self {
        Guard { policy, held: None }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The verdict on writing `desired` when `last` is the host set of the last write (`None`:
    /// nothing written yet by this replica as leader).
    pub fn check(
        &mut self,
        last: Option<&BTreeSet<Hostname>>,
        desired: &BTreeSet<Hostname>,
        now: Instant,
    ) -> Verdict {
        let Some(last) = last else {
            self.held = None;
            return Verdict::Apply;
        };
        let removed = last.difference(desired).count();
        if !self.policy.is_mass_removal(removed, last.len()) {
            self.held = None;
            return Verdict::Apply;
        }
        let last = last.len();
        match &self.held {
            Some(h) if h.hosts == *desired => {
                let until = h.since + self.policy.hold;
                if now >= until {
                    // Kept until the set is written (the next check after that is no mass
                    // removal and clears it), so a failed write is retried, not held again.
                    Verdict::Release { removed, last }
                } else {
                    Verdict::Hold {
                        removed,
                        last,
                        until,
                        fresh: false,
                    }
                }
            }
            // A new set, or another one than the set held: the hold starts (again) now.
            _ => {
                self.held = Some(Held {
                    hosts: desired.clone(),
                    since: now,
                });
                Verdict::Hold {
                    removed,
                    last,
                    until: now + self.policy.hold,
                    fresh: true,
                }
            }
        }
    }

    /// The leader changed hands or the last write is unknown: nothing is held any more.
    pub fn reset(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostname::HostPolicy;

    fn hosts(range: std::ops::Range<usize>) -> BTreeSet<Hostname> {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        range
            .map(|i| p.check(&format!("h{i}.example.com")).unwrap())
            .collect()
    }

    #[test]
    fn what_counts_as_a_mass_removal() {
        let p = Policy::DEFAULT;
        // (removed, of last, held?)
        for (removed, last, want) in [
            (10, 20, false), // half is not more than half
            (11, 20, true),
            (9, 10, false), // fewer than 10 hosts
            (10, 10, true),
            (10, 19, true),
            (100, 1000, false),
            (501, 1000, true),
            (0, 0, false),
        ] {
            assert_eq!(
                p.is_mass_removal(removed, last),
                want,
                "{removed} of {last}"
            );
        }
        let off = Policy {
            hold: Duration::ZERO,
            ..p
        };
        assert!(!off.is_mass_removal(1000, 1000), "a zero hold turns it off");
        let strict = Policy {
            share: 0.0,
            min: 1,
            ..p
        };
        assert!(strict.is_mass_removal(1, 1000));
    }

    /// (desired set, seconds after start, verdict), in order, against a last write of h0..h20.
    #[test]
    fn hold_release_and_restart_table() {
        #[derive(Debug, PartialEq)]
        enum V {
            Apply,
            Hold(usize, u64, bool),
            Release(usize),
        }
        let t0 = Instant::now();
        let last = hosts(0..20);
        let mut g = Guard::new(Policy::DEFAULT);
        let steps: &[(std::ops::Range<usize>, u64, V)] = &[
            (0..15, 0, V::Apply),               // 5 removed: a plain write
            (0..5, 10, V::Hold(15, 310, true)), // 15 of 20 removed: held
            (0..5, 100, V::Hold(15, 310, false)),
            (0..4, 200, V::Hold(16, 500, true)), // another set: the hold restarts
            (0..4, 499, V::Hold(16, 500, false)),
            (0..4, 500, V::Release(16)),
            (0..4, 501, V::Release(16)), // the write failed: retried, not held again
            (0..0, 600, V::Hold(20, 900, true)), // everything removed
            (0..20, 610, V::Apply),      // back: nothing held
            (0..0, 620, V::Hold(20, 920, true)), // so a new hold starts from scratch
        ];
        for (i, (range, at, want)) in steps.iter().enumerate() {
            let now = t0 + Duration::from_secs(*at);
            let got = match g.check(Some(&last), &hosts(range.clone()), now) {
                Verdict::Apply => V::Apply,
                Verdict::Hold {
                    removed,
                    last: l,
                    until,
                    fresh,
                } => {
                    assert_eq!(l, 20);
                    V::Hold(removed, (until - t0).as_secs(), fresh)
                }
                Verdict::Release { removed, last: l } => {
                    assert_eq!(l, 20);
                    V::Release(removed)
                }
            };
            assert_eq!(&got, want, "step {i}");
        }
    }

    #[test]
    fn nothing_is_held_without_a_last_write_or_after_a_reset() {
        let t0 = Instant::now();
        let mut g = Guard::new(Policy::DEFAULT);
        assert_eq!(g.check(None, &hosts(0..0), t0), Verdict::Apply);
        let last = hosts(0..20);
        assert!(matches!(
            g.check(Some(&last), &hosts(0..0), t0),
            Verdict::Hold { fresh: true, .. }
        ));
        g.reset();
        assert!(matches!(
            g.check(Some(&last), &hosts(0..0), t0 + Duration::from_secs(299)),
            Verdict::Hold { fresh: true, .. }
        ));
    }
}
