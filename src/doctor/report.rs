//! The report: one [`Check`] per line of inquiry, rendered as text or JSON. Pure.

use std::fmt::Write as _;

use serde::Serialize;

/// A check's verdict. Ordered by severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Not applicable to this configuration, or not checkable from here (the summary says why).
    Skip,
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Skip => "SKIP",
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding: what was checked, the verdict, the evidence seen and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier (for scripts reading the JSON).
    pub id: &'static str,
    /// The `--target` a per-target check is about (`None`: the default proxy, or not per target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub status: Status,
    pub summary: String,
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl Check {
    pub fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Self {
        Self {
            id,
            target: None,
            status,
            summary: summary.into(),
            evidence: Vec::new(),
            action: None,
        }
    }
    pub fn ok(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Ok, summary)
    }
    pub fn warn(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Warn, summary)
    }
    pub fn fail(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Fail, summary)
    }
    pub fn skip(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Skip, summary)
    }
    /// The check about a named target's proxy or ingress controller.
    pub fn for_target(mut self, name: &str) -> Self {
        self.target = Some(name.to_string());
        self
    }

    pub fn evidence(mut self, line: impl Into<String>) -> Self {
        self.evidence.push(line.into());
        self
    }
    pub fn evidence_all<I: IntoIterator<Item = String>>(mut self, lines: I) -> Self {
        self.evidence.extend(lines);
        self
    }
    pub fn action(mut self, what: impl Into<String>) -> Self {
        self.action = Some(what.into());
        self
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
}

/// The whole report, in the order the checks ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub checks: Vec<Check>,
    pub summary: Summary,
}

/// What `--output json` prints when doctor cannot run at all (bad flags, no cluster): the
/// error, the exit code it ends with and no checks, so a script reading stdout always gets JSON.
pub fn json_failure(error: &str, exit_code: u8) -> String {
    let body = serde_json::json!({
        "error": error,
        "exit_code": exit_code,
        "checks": [],
    });
    serde_json::to_string_pretty(&body).unwrap_or_default()
}

impl Report {
    pub fn new(mode: &'static str, checks: Vec<Check>) -> Self {
        let mut summary = Summary::default();
        for c in &checks {
            *match c.status {
                Status::Ok => &mut summary.ok,
                Status::Warn => &mut summary.warn,
                Status::Fail => &mut summary.fail,
                Status::Skip => &mut summary.skip,
            } += 1;
        }
        Self {
            mode,
            checks,
            summary,
        }
    }

    /// 1 when any check failed, else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.summary.fail > 0)
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a report always serializes");
        s.push('\n');
        s
    }

    pub fn to_text(&self) -> String {
        let mut out = format!("ouroboros doctor (mode {})\n\n", self.mode);
        for c in &self.checks {
            let target = c
                .target
                .as_ref()
                .map(|t| format!(" (target {t})"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<6} {}{target}: {}",
                format!("[{}]", c.status.as_str()),
                c.id,
                c.summary
            );
            for e in &c.evidence {
                let _ = writeln!(out, "         - {e}");
            }
            if let Some(a) = &c.action {
                let _ = writeln!(out, "         => {a}");
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{} OK, {} WARN, {} FAIL, {} SKIP",
            s.ok, s.warn, s.fail, s.skip
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_exit_code() {
        for (statuses, want_exit) in [
            (vec![], 0),
            (vec![Status::Ok, Status::Skip], 0),
            (vec![Status::Ok, Status::Warn], 0),
            (vec![Status::Warn, Status::Fail, Status::Ok], 1),
        ] {
            let checks: Vec<Check> = statuses.iter().map(|s| Check::new("x", *s, "")).collect();
            let r = Report::new("coredns", checks);
            assert_eq!(r.exit_code(), want_exit, "{statuses:?}");
            let s = &r.summary;
            assert_eq!(s.ok + s.warn + s.fail + s.skip, statuses.len());
        }
    }

    #[test]
    fn text_and_json_layout() {
        let r = Report::new(
            "coredns",
            vec![
                Check::ok("a", "fine").evidence("seen x"),
                Check::fail("b", "broken").action("fix it"),
            ],
        );
        assert_eq!(
            r.to_text(),
            "ouroboros doctor (mode coredns)\n\n\
             [OK]   a: fine\n\
             \x20        - seen x\n\
             [FAIL] b: broken\n\
             \x20        => fix it\n\
             \n1 OK, 0 WARN, 1 FAIL, 0 SKIP\n"
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["checks"][0]["status"], "OK");
        assert_eq!(v["checks"][1]["status"], "FAIL");
        assert!(v["checks"][0].get("action").is_none());
        assert_eq!(v["summary"]["fail"], 1);
    }
}
