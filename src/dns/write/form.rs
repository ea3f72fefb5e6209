//! What the controller reads of CoreDNS that the writers need, shared by both: the form the
//! CoreDNS writers answer in now (`--coredns-answer`, and for `auto` the controller's pick from
//! CoreDNS's version), read when they resolve an answer, so a changed pick reaches the ConfigMap
//! in the next write, one write with the whole block in its new form; and the CoreDNS
//! container's memory limit, which a Corefile whose reload would exceed it must not be written
//! under (`dns::reload_memory`).

use std::sync::{Arc, Mutex};

use crate::dns::answer_form::{AnswerForm, Picked};

#[derive(Clone, Debug)]
pub struct CurrentForm(Arc<Mutex<Picked>>);

impl CurrentForm {
    pub fn new(picked: Picked) -> Self {
        Self(Arc::new(Mutex::new(picked)))
    }

    /// Replaces the pick; whether the form changed (a changed reason alone writes nothing).
    pub fn set(&self, picked: Picked) -> bool {
        let mut p = self.0.lock().expect("form lock");
        let changed = p.form != picked.form;
        *p = picked;
        changed
    }

    pub fn get(&self) -> Picked {
        self.0.lock().expect("form lock").clone()
    }

    /// The form to write in (never `auto`).
    pub fn form(&self) -> AnswerForm {
        self.0.lock().expect("form lock").form
    }
}

/// The CoreDNS container's memory limit in bytes (`None`: none set, or not read yet).
#[derive(Clone, Debug, Default)]
pub struct MemoryLimit(Arc<Mutex<Option<u64>>>);

impl MemoryLimit {
    /// Replaces the limit; whether it changed.
    pub fn set(&self, limit: Option<u64>) -> bool {
        let mut l = self.0.lock().expect("limit lock");
        let changed = *l != limit;
        *l = limit;
        changed
    }

    pub fn get(&self) -> Option<u64> {
        *self.0.lock().expect("limit lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::Version;
    use crate::dns::answer_form::{pick, Known};

    #[test]
    fn a_changed_form_is_a_change_and_a_changed_reason_is_not() {
        let at = |v| pick(AnswerForm::Auto, &Known::Flag(Version(1, v, 0)), false);
        let f = CurrentForm::new(at(9));
        assert_eq!(f.form(), AnswerForm::Template);
        assert!(!f.set(at(8)), "still the pair");
        assert!(
            f.get().reason.contains("CoreDNS 1.8.0"),
            "the reason is kept"
        );
        assert!(f.set(at(11)));
        assert_eq!(f.form(), AnswerForm::View);
        assert!(!f.set(at(12)));
    }
}
