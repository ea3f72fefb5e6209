//! PURE: the names a sink makes its target hold, and which proxy target each goes to. Separate
//! from `sink` so that each writer can take it without importing the trait's module.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::error::{Reason, SinkError};
use crate::hostname::Hostname;
use crate::target::Target;

/// The names to answer and, with several proxy targets, which one each goes to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub hosts: BTreeSet<Hostname>,
    /// The hosts of named targets, each with its target; every other host is the default
    /// target's. Empty without `--target`.
    pub placed: BTreeMap<Hostname, Target>,
}

impl Plan {
    /// Every host to the default target.
    pub fn new(hosts: BTreeSet<Hostname>) -> Self {
        Plan {
            hosts,
            placed: BTreeMap::new(),
        }
    }

    /// The hosts of each of `targets` targets, by [`Target::position`]; the default target's set is borrowed
    /// when nothing is placed elsewhere. A host placed on a target the sink does not have is
    /// an error rather than an answer from the wrong proxy.
    pub fn groups(&self, targets: usize) -> Result<Vec<Cow<'_, BTreeSet<Hostname>>>, SinkError> {
        let targets = targets.max(1);
        if self.placed.is_empty() {
            let mut v = vec![Cow::Borrowed(&self.hosts)];
            v.resize(targets, Cow::Owned(BTreeSet::new()));
            return Ok(v);
        }
        let mut v = vec![BTreeSet::new(); targets];
        for h in &self.hosts {
            let target = self.placed.get(h).copied().unwrap_or(Target::Default);
            let i = target.position();
            let Some(group) = v.get_mut(i) else {
                return Err(SinkError {
                    reason: Reason::Invalid,
                    object: None,
                    message: format!("{h} is placed on proxy target {i}, which is not configured"),
                    kept: Box::default(),
                });
            };
            group.insert(h.clone());
        }
        Ok(v.into_iter().map(Cow::Owned).collect())
    }
}
