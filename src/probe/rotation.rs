//! PURE: which names a round probes. Each target's names are walked in order, a bounded sample
//! per round starting after the last name probed, so every name is visited over successive
//! rounds however the set changes; a name probed less than an interval ago is left for a later
//! round, so no host is probed more often than the interval.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The walk's state: where each target's walk stands and when each name was last probed.
#[derive(Debug)]
pub struct Rotation<T, H> {
    /// The last name probed per target: the next round starts after it.
    after: BTreeMap<T, H>,
    last: BTreeMap<H, Instant>,
}

impl<T, H> Default for Rotation<T, H> {
    fn default() -> Self {
        Rotation {
            after: BTreeMap::new(),
            last: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Copy, H: Ord + Clone> Rotation<T, H> {
    /// Up to `sample` names of each target of `names` (each target's names sorted, without
    /// duplicates) for a round at `now`: from the first name after the last one probed,
    /// wrapping around, leaving out names probed less than `interval` before `now`.
    pub fn pick(
        &self,
        names: &BTreeMap<T, Vec<H>>,
        sample: usize,
        now: Instant,
        interval: Duration,
    ) -> Vec<(T, H)> {
        let due = |h: &H| {
            self.last
                .get(h)
                .is_none_or(|t| now.saturating_duration_since(*t) >= interval)
        };
        let mut out = Vec::new();
        for (target, hosts) in names {
            let start = match self.after.get(target) {
                Some(after) => hosts.partition_point(|h| h <= after),
                None => 0,
            };
            let (tail, head) = hosts.split_at(start);
            out.extend(
                head.iter()
                    .chain(tail)
                    .filter(|h| due(h))
                    .take(sample)
                    .map(|h| (*target, h.clone())),
            );
        }
        out
    }

    /// Records that `host` of `target` was probed at `now`: its walk goes on after it.
    pub fn probed(&mut self, target: T, host: H, now: Instant) {
        self.last.insert(host.clone(), now);
        self.after.insert(target, host);
    }

    /// Forgets the names no longer in `names`.
    pub fn retain(&mut self, names: &BTreeMap<T, Vec<H>>) {
        self.last
            .retain(|h, _| names.values().any(|hosts| hosts.binary_search(h).is_ok()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &[(u8, &[&'static str])]) -> BTreeMap<u8, Vec<&'static str>> {
        t.iter().map(|(t, h)| (*t, h.to_vec())).collect()
    }

    const MIN: Duration = Duration::from_secs(60);

    /// Runs `rounds` rounds one interval apart, each probing everything picked.
    fn walk(
        names: &BTreeMap<u8, Vec<&'static str>>,
        sample: usize,
        rounds: usize,
    ) -> Vec<Vec<(u8, &'static str)>> {
        let mut r = Rotation::default();
        let t0 = Instant::now();
        (0..rounds)
            .map(|i| {
                let now = t0 + MIN * i as u32;
                let picked = r.pick(names, sample, now, MIN);
                for (t, h) in &picked {
                    r.probed(*t, *h, now);
                }
                picked
            })
            .collect()
    }

    #[test]
    fn rounds_walk_every_name_a_bounded_sample_at_a_time() {
        let n = names(&[(0, &["a", "b", "c", "d", "e"]), (1, &["x", "y"])]);
        for (sample, want) in [
            (
                2,
                vec![
                    vec![(0, "a"), (0, "b"), (1, "x"), (1, "y")],
                    vec![(0, "c"), (0, "d"), (1, "x"), (1, "y")],
                    vec![(0, "e"), (0, "a"), (1, "x"), (1, "y")],
                ],
            ),
            (
                3,
                vec![
                    vec![(0, "a"), (0, "b"), (0, "c"), (1, "x"), (1, "y")],
                    vec![(0, "d"), (0, "e"), (0, "a"), (1, "x"), (1, "y")],
                    vec![(0, "b"), (0, "c"), (0, "d"), (1, "x"), (1, "y")],
                ],
            ),
            (
                // Larger than a target: each name once per round, never twice.
                9,
                vec![
                    vec![
                        (0, "a"),
                        (0, "b"),
                        (0, "c"),
                        (0, "d"),
                        (0, "e"),
                        (1, "x"),
                        (1, "y"),
                    ];
                    3
                ],
            ),
            (0, vec![vec![]; 3]),
        ] {
            assert_eq!(walk(&n, sample, 3), want, "sample {sample}");
        }
    }

    #[test]
    fn every_name_is_visited_as_the_set_changes() {
        let mut r = Rotation::default();
        let t0 = Instant::now();
        let mut seen = Vec::new();
        let sets: [&[&str]; 4] = [
            &["a", "c", "e"],
            &["a", "b", "c", "e"], // b arrives behind the walk
            &["b", "c", "e", "f"], // a goes, f arrives
            &["b", "c", "e", "f"],
        ];
        for (i, set) in sets.iter().enumerate() {
            let n = names(&[(0, set)]);
            let now = t0 + MIN * i as u32;
            r.retain(&n);
            for (t, h) in r.pick(&n, 2, now, MIN) {
                r.probed(t, h, now);
                seen.push(h);
            }
        }
        assert_eq!(seen, ["a", "c", "e", "a", "b", "c", "e", "f"]);
        assert!(!r.last.contains_key("a"), "a left: forgotten");
    }

    #[test]
    fn no_name_is_probed_more_often_than_the_interval() {
        let n = names(&[(0, &["a", "b", "c"])]);
        let mut r = Rotation::default();
        let t0 = Instant::now();
        for (t, h) in r.pick(&n, 2, t0, MIN) {
            r.probed(t, h, t0);
        }
        // A round 10 s later (a round that ran late) finds only c due.
        let soon = t0 + Duration::from_secs(10);
        assert_eq!(r.pick(&n, 2, soon, MIN), [(0, "c")]);
        // A full interval later, a and b are due again, after c where the walk stands.
        assert_eq!(r.pick(&n, 3, t0 + MIN, MIN), [(0, "c"), (0, "a"), (0, "b")]);
    }
}
