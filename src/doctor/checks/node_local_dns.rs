//! node-local-dns: with --node-local-dns on, its Corefile must hold the same block as
//! CoreDNS's; off, an installed node-local-dns sends external names upstream past our block.
//! Separate from `coredns`: another ConfigMap, other flags, and its own failure modes.

use k8s_openapi::api::core::v1::ConfigMap;

use super::coredns::{block_lines, block_verdict, Expected};
use super::{coredns::UNKNOWN, inputs::Got};
use crate::dns::corefile;
use crate::dns::ConfigMapKey;
use crate::dns::Mode;
use crate::doctor::report::Check;

/// node-local-dns: with --node-local-dns on (coredns modes), its Corefile (`target`) must hold
/// the same block as CoreDNS's; off, an installed node-local-dns bypasses the block.
pub fn node_local_dns(
    mode: Mode,
    enabled: bool,
    target: &ConfigMapKey,
    got: &Got<ConfigMap>,
    want: Option<&Expected<'_>>,
) -> Check {
    const ID: &str = "node-local-dns";
    let (ns, name) = (&target.namespace, &target.name);
    let writes = enabled && mode.spec().edits_coredns();
    let cm = match got {
        Err(e) => return e.check(ID),
        Ok(None) if writes => {
            return Check::fail(
                ID,
                format!("ConfigMap {ns}/{name} not found, but --node-local-dns is on"),
            )
            .action(
                "point --node-local-dns-namespace and --node-local-dns-configmap at \
                 node-local-dns's ConfigMap (`node-local-dns` upstream, `nodelocaldns` on \
                 kubespray: kubectl get configmaps -A | grep -i local), or turn --node-local-dns \
                 off when node-local-dns is not installed",
            )
        }
        Ok(None) => {
            return Check::ok(
                ID,
                format!("no node-local-dns (ConfigMap {ns}/{name} not found)"),
            )
        }
        Ok(Some(cm)) => cm,
    };
    if !mode.spec().edits_coredns() {
        return Check::ok(
            ID,
            format!(
                "node-local-dns is installed; mode {} does not depend on CoreDNS",
                mode.name()
            ),
        );
    }
    let text = cm.data.as_ref().and_then(|d| d.get(&target.key));
    if !enabled {
        return bypassed(ID, target, text.map(String::as_str), want);
    }
    let Some(want) = want else {
        return Check::skip(ID, UNKNOWN);
    };
    let Some(text) = text else {
        let keys: Vec<&str> = cm
            .data
            .iter()
            .flat_map(|d| d.keys().map(String::as_str))
            .collect();
        return Check::fail(
            ID,
            format!("ConfigMap {ns}/{name} has no key {:?}", target.key),
        )
        .evidence(format!("keys: {}", keys.join(", ")))
        .action(
            "check --node-local-dns-namespace and --node-local-dns-configmap: node-local-dns \
             keeps its Corefile under the key `Corefile`",
        );
    };
    match corefile::splice_plugins(text, &want.groups) {
        Err(e) => Check::fail(
            ID,
            format!("the Corefile in ConfigMap {ns}/{name} cannot be edited"),
        )
        .evidence(e.to_string())
        .action(
            "fix node-local-dns's Corefile (the controller writes nothing there until it parses)",
        ),
        Ok(edit) => block_verdict(
            ID,
            &format!(" in ConfigMap {ns}/{name}"),
            text,
            &edit,
            want,
            &format!(
                "check that the controller runs and is leader (kubectl -n NAMESPACE logs \
                 deploy/ouroboros-controller) and may get and update ConfigMap {ns}/{name} (the \
                 rbac check)"
            ),
        ),
    }
}

/// node-local-dns is installed and --node-local-dns is off: its cache bypasses the CoreDNS
/// block (`text`: its Corefile, when it has one).
fn bypassed(
    id: &'static str,
    target: &ConfigMapKey,
    text: Option<&str>,
    want: Option<&Expected<'_>>,
) -> Check {
    let (ns, name) = (&target.namespace, &target.name);
    let mut c = Check::warn(
        id,
        format!(
            "node-local-dns is installed (ConfigMap {ns}/{name}) and --node-local-dns is off: \
             pods resolving through it send external names upstream and never see the \
             CoreDNS block"
        ),
    );
    if text.is_some_and(|t| block_lines(t).is_some()) {
        c = c.evidence(
            "its Corefile holds an ouroboros block, which the controller does not update \
             while --node-local-dns is off",
        );
    }
    let turn_on = "turn on --node-local-dns (chart: controller.nodeLocalDns.enabled) so the \
                   controller writes the same template block into its `.:53` server block, \
                   or use --mode external-dns";
    c.action(match want.map(Expected::form) {
        Some("rewrite") => {
            format!(
                "use --coredns-answer template or auto (node-local-dns needs the template pair, \
                 which both write there) and {turn_on}"
            )
        }
        _ => turn_on.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::fixtures::{cm, expect, forbidden, hosts, proxy, rewrite};
    use crate::doctor::report::Status;
    use crate::hostname::Hostname;
    use serde_json::json;
    use std::collections::BTreeSet;

    /// node-local-dns's Corefile as kubespray and the upstream manifest write it.
    const NL: &str = ".:53 {\n    bind 169.254.20.10\n    forward . 10.96.0.10\n}\n";

    fn corefile(text: &str) -> Got<ConfigMap> {
        Ok(Some(cm(json!({ "Corefile": text }))))
    }

    /// [`NL`] with our block for `names`.
    fn spliced(names: &[&str]) -> String {
        corefile::splice(NL, &hosts(names), &proxy()).unwrap().text
    }

    /// The ConfigMap, the hosts, and [`NL`] with our block for them and with a stale one.
    fn fixture() -> (ConfigMapKey, BTreeSet<Hostname>, String, String) {
        let current = spliced(&["a.example.com"]);
        let stale = spliced(&["old.example.com"]);
        let h = hosts(&["a.example.com"]);
        (ConfigMapKey::node_local_dns_default(), h, current, stale)
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases: mode, flag and ConfigMap, and the verdict"
    )]
    fn node_local_verdicts() {
        let (t, h, current, stale) = fixture();
        let nl = NL;
        // (mode, --node-local-dns, ConfigMap, want, summary starts with)
        let cases: Vec<(Mode, bool, Got<ConfigMap>, Status, &str)> = vec![
            (
                Mode::Coredns,
                false,
                corefile(nl),
                Status::Warn,
                "node-local-dns is installed",
            ),
            (
                Mode::CorednsImport,
                false,
                corefile(nl),
                Status::Warn,
                "node-local-dns is installed",
            ),
            (
                Mode::Coredns,
                false,
                Ok(None),
                Status::Ok,
                "no node-local-dns",
            ),
            (
                Mode::ExternalDns,
                false,
                corefile(nl),
                Status::Ok,
                "node-local-dns is installed;",
            ),
            (
                Mode::ExternalDns,
                true,
                Ok(None),
                Status::Ok,
                "no node-local-dns",
            ),
            (
                Mode::Coredns,
                true,
                corefile(&current),
                Status::Ok,
                "our block in ConfigMap kube-system/node-local-dns is present and current",
            ),
            (
                Mode::CorednsImport,
                true,
                corefile(&current),
                Status::Ok,
                "our block in ConfigMap kube-system/node-local-dns is present and current",
            ),
            (
                Mode::Coredns,
                true,
                corefile(nl),
                Status::Fail,
                "our block in ConfigMap kube-system/node-local-dns is missing",
            ),
            (
                Mode::Coredns,
                true,
                corefile(&stale),
                Status::Fail,
                "our block in ConfigMap kube-system/node-local-dns is stale",
            ),
            (
                Mode::Coredns,
                true,
                corefile("cluster.local:53 {\n}\n"),
                Status::Fail,
                "the Corefile in ConfigMap kube-system/node-local-dns cannot be edited",
            ),
            (
                Mode::Coredns,
                true,
                Ok(Some(cm(json!({"Corefile.base": nl})))),
                Status::Fail,
                "ConfigMap kube-system/node-local-dns has no key \"Corefile\"",
            ),
            (
                Mode::Coredns,
                true,
                Ok(None),
                Status::Fail,
                "ConfigMap kube-system/node-local-dns not found, but --node-local-dns is on",
            ),
            (
                Mode::Coredns,
                true,
                Err(forbidden("configmaps", "node-local-dns")),
                Status::Fail,
                "could not get configmaps",
            ),
        ];
        for (mode, on, got, want, summary) in cases {
            let c = node_local_dns(
                mode,
                on,
                &t,
                &got,
                expect(Some(&h), Some(&proxy())).as_ref(),
            );
            assert_eq!(c.status, want, "{mode:?} {on} {c:?}");
            assert!(c.summary.starts_with(summary), "{c:?}");
        }
    }

    #[test]
    fn node_local_actions_and_evidence() {
        let (t, h, current, stale) = fixture();
        let nl = NL;
        // Off: the action names the option; with rewrite, the answer form it needs first.
        let c = node_local_dns(
            Mode::Coredns,
            false,
            &t,
            &corefile(&current),
            expect(Some(&h), Some(&proxy())).as_ref(),
        );
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "turn on --node-local-dns (chart: controller.nodeLocalDns.enabled) so the \
                 controller writes the same template block into its `.:53` server block"
            ),
            "{c:?}"
        );
        assert_eq!(c.evidence.len(), 1, "a leftover block is mentioned: {c:?}");
        let c = node_local_dns(
            Mode::Coredns,
            false,
            &t,
            &corefile(nl),
            expect(Some(&h), Some(&rewrite())).as_ref(),
        );
        assert!(c
            .action
            .unwrap()
            .starts_with("use --coredns-answer template"));
        // Missing: both usual names and the flags.
        let c = node_local_dns(
            Mode::Coredns,
            true,
            &t,
            &Ok(None),
            expect(Some(&h), Some(&proxy())).as_ref(),
        );
        let a = c.action.unwrap();
        for want in [
            "`nodelocaldns`",
            "`node-local-dns`",
            "--node-local-dns-namespace",
            "--node-local-dns-configmap",
        ] {
            assert!(a.contains(want), "{want}: {a}");
        }
        // Stale: the rule diff, as for CoreDNS's block.
        let c = node_local_dns(
            Mode::Coredns,
            true,
            &t,
            &corefile(&stale),
            expect(Some(&h), Some(&proxy())).as_ref(),
        );
        assert_eq!(
            c.evidence,
            [
                r"missing: match ^a\.example\.com\.$",
                r"stale: match ^old\.example\.com\.$",
            ]
        );
        for (hs, a) in [(None, Some(&proxy())), (Some(&h), None)] {
            let c = node_local_dns(
                Mode::Coredns,
                true,
                &t,
                &corefile(nl),
                expect(hs, a).as_ref(),
            );
            assert_eq!(c.status, Status::Skip);
        }
    }
}
