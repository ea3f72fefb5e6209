//! coredns-version: which Deployment runs CoreDNS, its image's version, and whether that version
//! parses the block we would write. Separate: it reads the Deployment, not the Corefile, and owns
//! the image-reference parsing.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use super::coredns::Expected;
use super::{coredns::UNKNOWN, inputs::Got, inputs::Workload};
use crate::dns::answer::{oldest_coredns, Answer, ProxyAddrs, Version};
use crate::dns::answer_form::{image_version, COREDNS_DEPLOYMENT};
use crate::dns::answer_form::{known_from_images, pick, AnswerForm, Known, Picked};
use crate::dns::corefile;
use crate::dns::reload_memory::{self, parse_quantity};
use crate::dns::Mode;
use crate::doctor::report::{Check, Status};
use crate::hostname::Hostname;

/// Doctor reads the Deployment [`COREDNS_DEPLOYMENT`] first; else the one labelled this
/// (RKE2 names it `rke2-coredns-rke2-coredns`).
pub const KUBE_DNS_SELECTOR: &str = "k8s-app=kube-dns";

/// The workload's CoreDNS image: the first whose name contains `coredns` (`coredns`,
/// `hardened-coredns`, `mirrored-coredns-coredns`).
pub fn coredns_image(w: &Workload) -> Option<&str> {
    crate::dns::answer_form::coredns_image(w.images.iter().map(String::as_str))
}

/// Among Deployments, the CoreDNS one: the first running a CoreDNS image, else the first.
pub fn pick_coredns_workload(ws: &[Workload]) -> Option<&Workload> {
    ws.iter()
        .find(|w| coredns_image(w).is_some())
        .or_else(|| ws.first())
}

/// The form the controller writes in with these flags, as it picks it (`--coredns-answer
/// auto`): from `--coredns-version`, else from the image of the Deployment named
/// [`COREDNS_DEPLOYMENT`] (the only one it reads; doctor may have found another by label).
pub fn answer_pick(
    (asked, flag): (AnswerForm, Option<Version>),
    mode: Mode,
    namespace: &str,
    deployment: &Got<Workload>,
) -> Picked {
    let known = match (flag, deployment) {
        (Some(v), _) => Known::Flag(v),
        (None, Ok(Some(w))) if w.name == COREDNS_DEPLOYMENT => {
            let images: Vec<&str> = w.images.iter().map(String::as_str).collect();
            known_from_images(&w.reference(), &images)
        }
        (None, Ok(Some(w))) => Known::Unknown(format!(
            "CoreDNS runs as {}, and the controller reads only Deployment \
             {namespace}/{COREDNS_DEPLOYMENT}",
            w.reference()
        )),
        (None, Ok(None)) => Known::Unknown(format!(
            "there is no Deployment {namespace}/{COREDNS_DEPLOYMENT}"
        )),
        (None, Err(e)) => Known::Unknown(format!("the CoreDNS Deployment could not be read: {e}")),
    };
    pick(asked, &known, mode == Mode::CorednsImport)
}

/// coredns-version: the CoreDNS image's version against the oldest that parses our block, and
/// the form the block is written in (`picked`: `--coredns-answer`, or what `auto` picks).
/// `deployment` is the CoreDNS Deployment in `namespace` (None when none was found).
pub fn coredns_version(
    mode: Mode,
    namespace: &str,
    deployment: &Got<Workload>,
    want: Option<&Expected<'_>>,
    picked: &Picked,
) -> Check {
    let check = version_check(mode, namespace, deployment, want);
    if check.status == Status::Skip {
        return check;
    }
    check.evidence(format!("answer form {picked}"))
}

fn version_check(
    mode: Mode,
    namespace: &str,
    deployment: &Got<Workload>,
    want: Option<&Expected<'_>>,
) -> Check {
    const ID: &str = "coredns-version";
    if let Some(skip) = super::coredns::skip_unless_coredns(ID, mode) {
        return skip;
    }
    let Some(want) = want else {
        return Check::skip(ID, UNKNOWN);
    };
    let form = want.form();
    // The newest of what each target's rules need.
    let (need, why) = want
        .groups
        .iter()
        .map(|g| oldest_coredns(g.hosts, g.answer))
        .max_by_key(|(v, _)| *v)
        .unwrap_or((form_needs(want.hosts, Answer::Template), "no rules"));
    let needs = format!("our {form} block needs CoreDNS {need} or later: {why}");
    let w = match deployment {
        Err(e) => {
            return Check::warn(
                ID,
                "could not read the CoreDNS Deployment, so its version is unknown",
            )
            .evidence(e.to_string())
            .evidence(needs)
            .action(format!(
                "check the version by hand: kubectl -n {namespace} get deploy \
                 {COREDNS_DEPLOYMENT} -o jsonpath='{{.spec.template.spec.containers[*].image}}'; \
                 {}",
                e.action()
            ))
        }
        Ok(None) => {
            return Check::warn(
                ID,
                format!(
                    "no CoreDNS Deployment in namespace {namespace} (none named \
                     {COREDNS_DEPLOYMENT}, none labelled {KUBE_DNS_SELECTOR}), so its version \
                     is unknown"
                ),
            )
            .evidence(needs)
            .action(format!(
                "check the version by hand: kubectl -n {namespace} get deployments -o wide \
                 (the IMAGES column), or check --coredns-namespace"
            ))
        }
        Ok(Some(w)) => w,
    };
    let Some(image) = coredns_image(w) else {
        return Check::warn(ID, format!("{} runs no CoreDNS image", w.reference()))
            .evidence(format!("images: {}", w.images.join(", ")))
            .evidence(needs)
            .action(format!(
            "check that the cluster DNS is CoreDNS {need} or later (kube-dns, as on GKE, reads \
             no Corefile: use --mode external-dns there)"
        ));
    };
    let evidence = format!("{}: image {image}", w.reference());
    let Some(v) = image_version(image) else {
        return Check::warn(
            ID,
            format!("cannot tell the CoreDNS version from the image tag of {image}"),
        )
        .evidence(evidence)
        .evidence(needs)
        .action(format!(
            "check the version by hand: kubectl -n {} logs deploy/{} | grep -m1 CoreDNS- \
             (CoreDNS prints it when it starts)",
            w.namespace, w.name
        ));
    };
    if v >= need {
        let ok = Check::ok(
            ID,
            format!("CoreDNS {v} parses our {form} block (needs {need} or later)"),
        )
        .evidence(evidence);
        return match view_suggestion(mode, form, want.hosts, v) {
            Some(s) => ok.action(s),
            None => ok,
        };
    }
    let action = match form {
        "rewrite" => format!(
            "use --coredns-answer template (what auto picks before CoreDNS 1.10), which parses on \
             CoreDNS {} and later, \
             or upgrade CoreDNS to {need} or later",
            form_needs(want.hosts, Answer::Template)
        ),
        _ => format!("upgrade CoreDNS to {need} or later"),
    };
    Check::fail(
        ID,
        format!(
            "CoreDNS {v} is too old for our {form} block (needs {need} or later): it rejects \
             the Corefile"
        ),
    )
    .evidence(evidence)
    .evidence(needs)
    .action(action)
}

/// coredns-reload-memory: whether CoreDNS can reload the Corefile with the block the
/// controller would write (`corefile` spliced with `want`) within its container's memory limit,
/// as the controller's guard predicts it (`dns::reload_memory`). Only the Deployment named
/// [`COREDNS_DEPLOYMENT`] counts: it is the one the controller reads.
pub fn reload_memory(
    mode: Mode,
    corefile: Option<&str>,
    want: Option<&Expected<'_>>,
    deployment: &Got<Workload>,
) -> Check {
    const ID: &str = "coredns-reload-memory";
    if mode != Mode::Coredns {
        return Check::skip(
            ID,
            format!("mode {}: the guard is coredns mode's", mode.name()),
        );
    }
    let (Some(text), Some(want)) = (corefile, want) else {
        return Check::skip(ID, UNKNOWN);
    };
    let Ok(Some(w)) = deployment
        .as_ref()
        .map(|d| d.as_ref().filter(|w| w.name == COREDNS_DEPLOYMENT))
    else {
        return Check::skip(
            ID,
            format!("no Deployment {COREDNS_DEPLOYMENT} was read: the controller guards nothing"),
        );
    };
    let limit = coredns_image(w).and_then(|i| w.memory_limits.get(i));
    let Some((quantity, limit)) = limit.and_then(|q| Some((q, parse_quantity(q)?))) else {
        return Check::ok(
            ID,
            format!(
                "{} sets no memory limit on CoreDNS: nothing to guard",
                w.reference()
            ),
        );
    };
    let Ok(edit) = corefile::splice_groups(text, &want.groups) else {
        return Check::skip(ID, "the Corefile does not parse (see coredns-block)");
    };
    let form = match want
        .groups
        .iter()
        .all(|g| matches!(g.answer, Answer::View(_)))
    {
        true => AnswerForm::View,
        false => AnswerForm::Template,
    };
    let evidence = format!("{}: memory limit {quantity}", w.reference());
    let bytes = edit.text.len();
    match reload_memory::fits(form, bytes, Some(limit)) {
        Ok(()) => Check::ok(
            ID,
            format!(
                "a reload of the {bytes}-byte Corefile with our {} block is predicted to peak at \
                 {} MiB (with a {}% margin), within CoreDNS's memory limit",
                form.as_str(),
                reload_memory::with_margin(reload_memory::predicted_peak(form, bytes))
                    .div_ceil(1 << 20),
                reload_memory::MARGIN_PERCENT
            ),
        )
        .evidence(evidence),
        // The controller writes a Corefile no larger than the one CoreDNS runs anyway.
        Err(e) if bytes <= text.len() => Check::warn(ID, e.to_string()).evidence(evidence).action(
            "CoreDNS runs a Corefile at least as large: raise the memory limit before its next \
             restart or reload",
        ),
        Err(e) => Check::fail(ID, format!("{e}: the controller does not write it"))
            .evidence(evidence)
            .action(
                "raise the memory limit of the CoreDNS Deployment's container, hairpin fewer \
                 names (--ingress-class, --allow-domain), or use --coredns-answer view (auto \
                 picks it on CoreDNS 1.10 and later); until then the block written last stays \
                 (BlockReloadTooLarge Event)",
            ),
    }
}

/// From this many names on, doctor suggests the view form where CoreDNS has it: the template
/// pair's patterns are scanned by every A/AAAA query under the names' top-level domains, which
/// bench/coredns measures at 1.4-1.9x CPU a hairpinned query at 1,000 names and 4.2x at 30,000,
/// against 1.0-1.2x for the view form's set lookup.
pub const VIEW_SUGGESTED_FROM: usize = 1000;

/// The suggestion to move to `--coredns-answer view`, when the block is the template pair in
/// the Corefile (the import snippet cannot hold server blocks), the names are many and CoreDNS
/// `v` has the `view` plugin.
fn view_suggestion(
    mode: Mode,
    form: &str,
    hosts: &BTreeSet<Hostname>,
    v: Version,
) -> Option<String> {
    (mode == Mode::Coredns
        && form == "template"
        && hosts.len() >= VIEW_SUGGESTED_FROM
        && v >= form_needs(hosts, Answer::View))
    .then(|| {
        format!(
            "{} names: --coredns-answer view (chart: controller.corednsAnswer=view) gives \
                 the same answers with one set lookup a query instead of a scan of every \
                 pattern, and CoreDNS {v} has the view plugin (docs/coredns-answers.md)",
            hosts.len()
        )
    })
}

/// The oldest CoreDNS that parses the `form` (`Answer::Template`, `Answer::View`) of `hosts`.
fn form_needs(hosts: &BTreeSet<Hostname>, form: fn(ProxyAddrs) -> Answer) -> Version {
    let any = ProxyAddrs::new(&[IpAddr::V4(Ipv4Addr::UNSPECIFIED)]).expect("one address");
    oldest_coredns(hosts, &form(any)).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::fixtures::{expect, forbidden, hosts, proxy, rewrite};
    use crate::doctor::report::Status;
    use std::collections::BTreeMap;

    /// Doctor picks the form as the controller does: from the flag, else from the Deployment
    /// named coredns only, and says the pick in the check.
    #[test]
    fn the_answer_form_is_picked_as_the_controller_picks_it() {
        let auto = (AnswerForm::Auto, None);
        let p = answer_pick(
            auto,
            Mode::Coredns,
            "kube-system",
            &dep("registry.k8s.io/coredns/coredns:v1.11.3"),
        );
        assert_eq!(p.form, AnswerForm::View, "{p}");
        let p = answer_pick(
            auto,
            Mode::Coredns,
            "kube-system",
            &dep("mcr.microsoft.com/oss/kubernetes/coredns:v1.9.4-hotfix.20240704"),
        );
        assert_eq!(p.form, AnswerForm::Template, "{p}");
        let mut rke2 = dep("rancher/hardened-coredns:v1.12.1-build20250401")
            .unwrap()
            .unwrap();
        rke2.name = "rke2-coredns-rke2-coredns".into();
        let p = answer_pick(auto, Mode::Coredns, "kube-system", &Ok(Some(rke2)));
        assert!(
            p.warns()
                && p.reason
                    .contains("reads only Deployment kube-system/coredns"),
            "{p}"
        );
        let p = answer_pick(
            (AnswerForm::Auto, Version::parse("1.12")),
            Mode::Coredns,
            "kube-system",
            &Ok(None),
        );
        assert_eq!(p.form, AnswerForm::View, "{p}");
        let p = answer_pick(
            auto,
            Mode::CorednsImport,
            "kube-system",
            &dep("coredns/coredns:1.12.0"),
        );
        assert_eq!(p.form, AnswerForm::Template, "{p}");
        let p = answer_pick(auto, Mode::Coredns, "kube-system", &Ok(None));
        assert!(
            p.warns() && p.reason.contains("no Deployment kube-system/coredns"),
            "{p}"
        );
        let (h, a) = (hosts(&["a.example.com"]), proxy());
        let c = coredns_version(
            Mode::Coredns,
            "kube-system",
            &dep("coredns/coredns:1.12.0"),
            expect(Some(&h), Some(&a)).as_ref(),
            &p,
        );
        assert!(
            c.evidence
                .last()
                .unwrap()
                .starts_with("answer form template: --coredns-answer auto does not know"),
            "{c:?}"
        );
    }

    /// The guard as doctor reports it: no limit is OK, a limit the desired Corefile's reload
    /// would exceed FAILs (the controller does not write it), a roomy one is OK.
    #[test]
    fn the_reload_guard_is_judged_as_the_controller_does() {
        let limited = |q: &str| -> Got<Workload> {
            let mut w = dep("registry.k8s.io/coredns/coredns:v1.11.3")
                .unwrap()
                .unwrap();
            w.memory_limits = BTreeMap::from([(w.images[0].clone(), q.to_string())]);
            Ok(Some(w))
        };
        let names: Vec<String> = (0..3000).map(|i| format!("host{i}.example.com")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (h, a) = (hosts(&names), proxy());
        let want = expect(Some(&h), Some(&a));
        let text = crate::doctor::checks::fixtures::PLAIN;
        let c = |d: &Got<Workload>| reload_memory(Mode::Coredns, Some(text), want.as_ref(), d);
        assert_eq!(c(&dep("coredns/coredns:1.11.3")).status, Status::Ok);
        let fail = c(&limited("60Mi"));
        assert_eq!(fail.status, Status::Fail, "{fail:?}");
        assert!(
            fail.summary
                .contains("over CoreDNS's memory limit of 60 MiB"),
            "{fail:?}"
        );
        assert!(fail
            .action
            .as_deref()
            .unwrap()
            .starts_with("raise the memory limit"));
        assert_eq!(
            fail.evidence,
            ["Deployment kube-system/coredns: memory limit 60Mi"]
        );
        assert_eq!(c(&limited("170Mi")).status, Status::Ok);
        assert_eq!(c(&Ok(None)).status, Status::Skip);
        assert_eq!(
            reload_memory(
                Mode::CorednsImport,
                Some(text),
                want.as_ref(),
                &limited("60Mi")
            )
            .status,
            Status::Skip
        );
    }

    #[test]
    fn the_coredns_container() {
        let w = |name: &str, images: &[&str]| Workload {
            kind: "Deployment",
            namespace: "kube-system".into(),
            name: name.into(),
            labels: BTreeMap::new(),
            args: vec![],
            images: images.iter().map(|s| s.to_string()).collect(),
            memory_limits: BTreeMap::new(),
        };
        let rke2 = w(
            "rke2-coredns-rke2-coredns",
            &["rancher/hardened-coredns:v1.11.1-build20240305"],
        );
        assert_eq!(
            coredns_image(&rke2),
            Some("rancher/hardened-coredns:v1.11.1-build20240305")
        );
        let sidecar = w("kube-dns", &["gke.gcr.io/k8s-dns-kube-dns:1.23.0"]);
        assert_eq!(coredns_image(&sidecar), None);
        let both = [sidecar.clone(), rke2.clone()];
        assert_eq!(pick_coredns_workload(&both), Some(&rke2));
        assert_eq!(
            pick_coredns_workload(std::slice::from_ref(&sidecar)),
            Some(&sidecar)
        );
        assert_eq!(pick_coredns_workload(&[]), None);
    }

    /// The CoreDNS Deployment running `image`.
    fn dep(image: &str) -> Got<Workload> {
        Ok(Some(Workload {
            kind: "Deployment",
            namespace: "kube-system".into(),
            name: "coredns".into(),
            labels: BTreeMap::new(),
            args: vec![],
            images: vec![image.into()],
            memory_limits: BTreeMap::new(),
        }))
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases: image, hosts and answer form, and the verdict"
    )]
    fn version_verdicts() {
        let exact = hosts(&["a.example.com"]);
        let wild = hosts(&["a.example.com", "*.apps.example.com"]);
        // (image, hosts, answer, want)
        let cases: Vec<(Got<Workload>, &BTreeSet<Hostname>, Answer, Status)> = vec![
            (
                dep("registry.k8s.io/coredns/coredns:v1.11.3"),
                &wild,
                rewrite(),
                Status::Ok,
            ),
            (
                dep("registry.k8s.io/coredns/coredns:v1.11.3"),
                &wild,
                proxy(),
                Status::Ok,
            ),
            (dep("coredns/coredns:1.8.4"), &wild, rewrite(), Status::Ok),
            (dep("coredns/coredns:1.8.3"), &wild, rewrite(), Status::Fail),
            (dep("coredns/coredns:1.8.3"), &exact, rewrite(), Status::Ok),
            (dep("coredns/coredns:1.8.3"), &wild, proxy(), Status::Ok),
            (dep("coredns/coredns:1.6.7"), &exact, proxy(), Status::Fail),
            (
                dep("rancher/hardened-coredns:v1.8.3-build20210223"),
                &wild,
                rewrite(),
                Status::Fail,
            ),
            (
                dep("eks/coredns:v1.11.1-eksbuild.4"),
                &wild,
                rewrite(),
                Status::Ok,
            ),
            (dep("coredns/coredns:latest"), &wild, proxy(), Status::Warn),
            (
                dep("coredns/coredns@sha256:0123"),
                &wild,
                proxy(),
                Status::Warn,
            ),
            (
                dep("gke.gcr.io/k8s-dns-kube-dns:1.23.0"),
                &wild,
                proxy(),
                Status::Warn,
            ),
            (Ok(None), &wild, proxy(), Status::Warn),
            (
                Err(forbidden("deployments.apps", "coredns")),
                &wild,
                proxy(),
                Status::Warn,
            ),
        ];
        for (got, h, a, want) in cases {
            let c = version_check(
                Mode::Coredns,
                "kube-system",
                &got,
                expect(Some(h), Some(&a)).as_ref(),
            );
            assert_eq!(c.status, want, "{got:?} {a:?}: {c:?}");
        }
        let old = dep("coredns/coredns:1.8.3");
        let c = version_check(
            Mode::Coredns,
            "kube-system",
            &old,
            expect(Some(&wild), Some(&rewrite())).as_ref(),
        );
        assert_eq!(
            c.summary,
            "CoreDNS 1.8.3 is too old for our rewrite block (needs 1.8.4 or later): it rejects \
             the Corefile"
        );
        assert_eq!(
            c.evidence[0],
            "Deployment kube-system/coredns: image coredns/coredns:1.8.3"
        );
        assert!(c.evidence[1].contains("answer auto"), "{c:?}");
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "use --coredns-answer template (what auto picks before CoreDNS 1.10), which parses on \
                 CoreDNS 1.7.0"
            ),
            "{c:?}"
        );
        let c = version_check(
            Mode::Coredns,
            "kube-system",
            &dep("coredns/coredns:1.6.7"),
            expect(Some(&exact), Some(&proxy())).as_ref(),
        );
        assert_eq!(
            c.action.as_deref(),
            Some("upgrade CoreDNS to 1.7.0 or later")
        );
        let c = version_check(
            Mode::Coredns,
            "kube-system",
            &Err(forbidden("deployments.apps", "coredns")),
            expect(Some(&wild), Some(&proxy())).as_ref(),
        );
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "check the version by hand: kubectl -n kube-system get deploy coredns -o \
                 jsonpath='{.spec.template.spec.containers[*].image}'"
            ),
            "{c:?}"
        );
        assert_eq!(
            version_check(
                Mode::EtcHosts,
                "kube-system",
                &old,
                expect(Some(&wild), Some(&proxy())).as_ref()
            )
            .status,
            Status::Skip
        );
        assert_eq!(
            version_check(
                Mode::Coredns,
                "kube-system",
                &old,
                expect(None, Some(&proxy())).as_ref()
            )
            .status,
            Status::Skip
        );
        assert_eq!(
            version_check(
                Mode::Coredns,
                "kube-system",
                &old,
                expect(Some(&wild), None).as_ref()
            )
            .status,
            Status::Skip
        );
    }

    #[test]
    fn the_view_form_is_suggested_for_many_names_where_coredns_has_it() {
        let many: Vec<String> = (0..VIEW_SUGGESTED_FROM)
            .map(|i| format!("n{i}.example.com"))
            .collect();
        let many = hosts(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let few = hosts(&["shop.example.com"]);
        let view = Answer::View(match proxy() {
            Answer::Template(a) => a,
            _ => unreachable!(),
        });
        // (mode, image, hosts, answer, suggested)
        let cases = [
            (
                Mode::Coredns,
                "coredns/coredns:1.11.3",
                &many,
                proxy(),
                true,
            ),
            (
                Mode::Coredns,
                "coredns/coredns:1.10.0",
                &many,
                proxy(),
                true,
            ),
            (
                Mode::Coredns,
                "coredns/coredns:1.9.4",
                &many,
                proxy(),
                false,
            ),
            (
                Mode::Coredns,
                "coredns/coredns:1.11.3",
                &few,
                proxy(),
                false,
            ),
            (Mode::Coredns, "coredns/coredns:1.11.3", &many, view, false),
            (
                Mode::Coredns,
                "coredns/coredns:1.11.3",
                &many,
                rewrite(),
                false,
            ),
            (
                Mode::CorednsImport,
                "coredns/coredns:1.11.3",
                &many,
                proxy(),
                false,
            ),
        ];
        for (mode, image, h, a, suggested) in cases {
            let c = version_check(
                mode,
                "kube-system",
                &dep(image),
                expect(Some(h), Some(&a)).as_ref(),
            );
            assert_eq!(c.status, Status::Ok, "{c:?}");
            let action = c.action.unwrap_or_default();
            assert_eq!(
                action.contains("--coredns-answer view"),
                suggested,
                "{mode:?} {image} {} names {}: {action}",
                h.len(),
                a.form()
            );
        }
    }
}
