//! Which form the CoreDNS block answers in (`--coredns-answer`), and what `auto`, the default,
//! picks: the `view` form where the cluster's CoreDNS has the `view` plugin (1.10 and later),
//! the template pair where it has not or where its version is unknown. The version comes from
//! `--coredns-version` or from the tag of the CoreDNS Deployment's image, read here from the
//! image reference (the controller and doctor read the Deployment; `render` has only the flag).
//!
//! Why `auto` and not always the pair: at thousands of names the pair's patterns cost CoreDNS
//! several times the CPU a query and a reload that can exceed kubeadm's 170 MiB memory limit,
//! where the view form's set lookup does not (bench/coredns/README.md). Why never `rewrite`:
//! it answers every query type of a host from the cluster domain (docs/coredns-answers.md).

use std::fmt;

use clap::ValueEnum;

use super::answer::{Answer, ProxyAddrs, Version};

/// How the CoreDNS block answers (coredns and coredns-import modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AnswerForm {
    /// `view` where the cluster's CoreDNS has it (1.10 and later, from --coredns-version or the
    /// CoreDNS Deployment's image tag) in coredns mode, else the `template` pair (older or
    /// unknown CoreDNS, coredns-import mode; node-local-dns always gets the pair). Never
    /// `rewrite`.
    Auto,
    /// `template IN A` / `template IN AAAA` answering only A and AAAA queries with the proxy
    /// Service's ClusterIPs (or --proxy-ip); every other query type keeps its public answer.
    /// Works on CoreDNS 1.7 and later and in node-local-dns.
    Template,
    /// For large sets (thousands of names): a server block per top-level domain before the root
    /// block, whose `view` passes only A and AAAA queries for the hairpinned names (one set
    /// lookup) to the same `template` answers; every other query goes to the root block as
    /// before. About a third of the template pair's size per name. Needs CoreDNS 1.10 or later;
    /// coredns mode only (node-local-dns, which has no `view`, gets the template pair).
    View,
    /// `rewrite name` lines to --proxy-fqdn, as the reference tool writes. A name rewrite
    /// answers every query type for the host from the cluster domain (breaks cert-manager
    /// DNS-01 for apex and delegated hosts; before CoreDNS 1.8.4 for every host), autopath
    /// skips it, and wildcard lines need CoreDNS 1.8.4 or later (`answer auto`).
    Rewrite,
}

impl AnswerForm {
    /// The answer with the proxy's addresses in this form; `None` for `rewrite`, which answers
    /// with a name. `auto` before its pick answers as the pair, which every CoreDNS parses.
    pub fn with_addrs(self, addrs: ProxyAddrs) -> Option<Answer> {
        match self {
            AnswerForm::Auto | AnswerForm::Template => Some(Answer::Template(addrs)),
            AnswerForm::View => Some(Answer::View(addrs)),
            AnswerForm::Rewrite => None,
        }
    }

    /// The value as `--coredns-answer` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerForm::Auto => "auto",
            AnswerForm::Template => "template",
            AnswerForm::View => "view",
            AnswerForm::Rewrite => "rewrite",
        }
    }
}

/// The CoreDNS Deployment in --coredns-namespace whose image tag `auto` reads (and doctor first):
/// kubeadm's, k3s's, EKS's and AKS's name.
pub const COREDNS_DEPLOYMENT: &str = "coredns";

/// The CoreDNS image among a pod's: the first whose name contains `coredns` (`coredns`,
/// `hardened-coredns`, `mirrored-coredns-coredns`).
pub fn coredns_image<'a>(images: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    images
        .into_iter()
        .find(|i| image_name(i).to_ascii_lowercase().contains("coredns"))
}

/// The first CoreDNS with the `view` plugin.
pub const VIEW_FROM: Version = Version(1, 10, 0);

/// `--coredns-version`: `1.11.3` or `v1.11.3` (a suffix after the patch number is ignored).
pub fn parse_version(s: &str) -> Result<Version, String> {
    Version::parse(s).ok_or_else(|| {
        format!("{s:?} is not a CoreDNS version: give it as MAJOR.MINOR[.PATCH], e.g. 1.11.3")
    })
}

/// An image reference without its digest, tag and registry path: `coredns` for
/// `registry.k8s.io/coredns/coredns:v1.11.3@sha256:…`.
pub fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// An image reference's tag (`v1.11.3` for `registry.k8s.io/coredns/coredns:v1.11.3@sha256:…`),
/// None when it has none (digest only, or no tag at all). A registry's port
/// (`registry:5000/coredns`) is not a tag: only the last path segment is read.
pub fn image_tag(image: &str) -> Option<&str> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split_once(':')
        .map(|(_, tag)| tag)
        .filter(|t| !t.is_empty())
}

/// The CoreDNS version an image's tag names: kubeadm's `v1.11.3`, k3s's `1.12.0`, RKE2's
/// `v1.12.1-build20250401`, EKS's `v1.11.4-eksbuild.14`, AKS's `v1.9.4-hotfix.20240704`. None
/// for a digest-only reference or a tag that starts with no version (`latest`).
pub fn image_version(image: &str) -> Option<Version> {
    image_tag(image).and_then(Version::parse)
}

/// What is known of the cluster's CoreDNS version, and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// `--coredns-version`.
    Flag(Version),
    /// The tag of the CoreDNS Deployment's image.
    Image { image: String, version: Version },
    /// Unknown, and why (the Deployment could not be read, its image has no version tag, or
    /// `render` has no cluster to read).
    Unknown(String),
}

/// What the images of `object` (the CoreDNS Deployment, as `Deployment NS/NAME`) say of its
/// version: the first CoreDNS image's tag, else why not.
pub fn known_from_images(object: &str, images: &[&str]) -> Known {
    let Some(image) = coredns_image(images.iter().copied()) else {
        return Known::Unknown(format!(
            "{object} runs no CoreDNS image (images: {})",
            images.join(", ")
        ));
    };
    match image_version(image) {
        Some(version) => Known::Image {
            image: image.to_string(),
            version,
        },
        None => Known::Unknown(format!(
            "the image {image} of {object} has no version tag (a digest only?)"
        )),
    }
}

/// Why the form is what it is; a metric label (`basis`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// --coredns-answer named the form.
    Asked,
    /// auto, from the CoreDNS version (flag or image).
    Version,
    /// auto, the version unknown: the pair.
    Unknown,
    /// auto in coredns-import mode: the snippet cannot hold the view form's server blocks.
    Snippet,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Asked => "asked",
            Basis::Version => "version",
            Basis::Unknown => "unknown_version",
            Basis::Snippet => "import_snippet",
        }
    }
}

/// The form the block is written in (never `auto`), why, and on what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    pub form: AnswerForm,
    pub basis: Basis,
    pub reason: String,
}

impl Picked {
    /// Whether the pick deserves a warning: `auto` could not tell the version.
    pub fn warns(&self) -> bool {
        self.basis == Basis::Unknown
    }
}

impl fmt::Display for Picked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.form.as_str(), self.reason)
    }
}

/// The form to write: `asked` itself unless `auto`, which picks the view form on CoreDNS 1.10
/// and later, the pair otherwise. `snippet`: the block is the coredns-import snippet, imported
/// inside the root server block, which cannot hold server blocks.
pub fn pick(asked: AnswerForm, known: &Known, snippet: bool) -> Picked {
    let picked = |form, basis, reason: String| Picked {
        form,
        basis,
        reason,
    };
    if asked != AnswerForm::Auto {
        return picked(
            asked,
            Basis::Asked,
            format!("--coredns-answer {}", asked.as_str()),
        );
    }
    if snippet {
        return picked(
            AnswerForm::Template,
            Basis::Snippet,
            "--coredns-answer auto in coredns-import mode: the snippet is imported inside the \
             root server block, which cannot hold the view form's server blocks"
                .into(),
        );
    }
    let (version, from) = match known {
        Known::Flag(v) => (*v, "--coredns-version".to_string()),
        Known::Image { image, version } => (*version, format!("the image {image}")),
        Known::Unknown(why) => {
            return picked(
                AnswerForm::Template,
                Basis::Unknown,
                format!(
                    "--coredns-answer auto does not know the cluster's CoreDNS version ({why}), \
                     so it writes the template pair, which every CoreDNS parses; give the \
                     version with --coredns-version (chart: controller.corednsVersion) for the \
                     view form on CoreDNS {VIEW_FROM} and later"
                ),
            )
        }
    };
    if version >= VIEW_FROM {
        picked(
            AnswerForm::View,
            Basis::Version,
            format!(
                "--coredns-answer auto: CoreDNS {version} (from {from}) has the view plugin \
                 (CoreDNS {VIEW_FROM} and later)"
            ),
        )
    } else {
        picked(
            AnswerForm::Template,
            Basis::Version,
            format!(
                "--coredns-answer auto: CoreDNS {version} (from {from}) has no view plugin \
                 (CoreDNS {VIEW_FROM} and later), so the template pair"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_distributions_image_tags() {
        for (image, want) in [
            ("registry.k8s.io/coredns/coredns:v1.11.3", Some((1, 11, 3))),
            ("rancher/mirrored-coredns-coredns:1.12.0", Some((1, 12, 0))),
            (
                "rancher/hardened-coredns:v1.12.1-build20250401",
                Some((1, 12, 1)),
            ),
            (
                "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.11.4-eksbuild.14",
                Some((1, 11, 4)),
            ),
            (
                "mcr.microsoft.com/oss/kubernetes/coredns:v1.9.4-hotfix.20240704",
                Some((1, 9, 4)),
            ),
            // A tag beside a digest is still the tag.
            (
                "registry:5000/coredns/coredns:1.8.3@sha256:0123abcd",
                Some((1, 8, 3)),
            ),
            ("coredns/coredns:1.10", Some((1, 10, 0))),
            // Digest only, no tag, a port that is no tag, a tag without a version.
            ("registry.k8s.io/coredns/coredns@sha256:0123abcd", None),
            ("registry:5000/coredns", None),
            ("coredns:", None),
            ("coredns/coredns:latest", None),
            ("coredns/coredns:v1", None),
        ] {
            assert_eq!(
                image_version(image),
                want.map(|(a, b, c)| Version(a, b, c)),
                "{image}"
            );
        }
        assert_eq!(
            image_name("registry:5000/coredns/coredns:1.8.3@sha256:ab"),
            "coredns"
        );
        assert_eq!(image_tag("registry:5000/coredns@sha256:ab"), None);
    }

    #[test]
    fn the_coredns_image_among_a_pods() {
        let d = "Deployment kube-system/coredns";
        assert_eq!(
            known_from_images(
                d,
                &[
                    "docker.io/istio/proxyv2:1.20",
                    "rancher/hardened-coredns:v1.12.1-build20250401"
                ]
            ),
            Known::Image {
                image: "rancher/hardened-coredns:v1.12.1-build20250401".into(),
                version: Version(1, 12, 1)
            }
        );
        let Known::Unknown(why) =
            known_from_images(d, &["registry.k8s.io/coredns/coredns@sha256:ab"])
        else {
            panic!("a digest is no version");
        };
        assert!(
            why.contains("coredns@sha256:ab of Deployment kube-system/coredns has no version tag"),
            "{why}"
        );
        let Known::Unknown(why) = known_from_images(d, &["gke.gcr.io/k8s-dns-kube-dns:1.23.0"])
        else {
            panic!("kube-dns is no CoreDNS");
        };
        assert!(
            why.contains("runs no CoreDNS image (images: gke.gcr.io/k8s-dns-kube-dns:1.23.0)"),
            "{why}"
        );
    }

    #[test]
    fn the_flag_takes_a_version_and_says_what_it_wants() {
        assert_eq!(parse_version("1.11.3"), Ok(Version(1, 11, 3)));
        assert_eq!(parse_version("v1.10"), Ok(Version(1, 10, 0)));
        let e = parse_version("eleven").unwrap_err();
        assert!(e.contains("MAJOR.MINOR[.PATCH], e.g. 1.11.3"), "{e}");
    }

    #[test]
    fn auto_picks_view_from_1_10_and_the_pair_otherwise() {
        use AnswerForm::{Auto, Rewrite, Template, View};
        let image = |tag: &str| Known::Image {
            image: format!("registry.k8s.io/coredns/coredns:{tag}"),
            version: Version::parse(tag).unwrap(),
        };
        let unknown = Known::Unknown("the Deployment's image has no version tag".into());
        let v = |s| Known::Flag(Version::parse(s).unwrap());
        for (asked, known, snippet, form, basis, says) in [
            (Auto, image("v1.11.3"), false, View, Basis::Version,
             "CoreDNS 1.11.3 (from the image registry.k8s.io/coredns/coredns:v1.11.3) has the view plugin"),
            (Auto, image("v1.10.0"), false, View, Basis::Version, "CoreDNS 1.10.0"),
            (Auto, image("v1.9.4"), false, Template, Basis::Version,
             "CoreDNS 1.9.4 (from the image registry.k8s.io/coredns/coredns:v1.9.4) has no view plugin"),
            (Auto, v("1.15.0"), false, View, Basis::Version, "(from --coredns-version)"),
            (Auto, v("1.8.6"), false, Template, Basis::Version, "has no view plugin"),
            (Auto, unknown.clone(), false, Template, Basis::Unknown,
             "(the Deployment's image has no version tag), so it writes the template pair"),
            // The snippet cannot hold server blocks, whatever the version.
            (Auto, v("1.15.0"), true, Template, Basis::Snippet, "coredns-import mode"),
            (Auto, unknown.clone(), true, Template, Basis::Snippet, "coredns-import mode"),
            // A form asked for is kept, even where auto would pick another.
            (Template, v("1.15.0"), false, Template, Basis::Asked, "--coredns-answer template"),
            (View, unknown.clone(), false, View, Basis::Asked, "--coredns-answer view"),
            (Rewrite, v("1.7.0"), false, Rewrite, Basis::Asked, "--coredns-answer rewrite"),
        ] {
            let p = pick(asked, &known, snippet);
            let what = format!("{asked:?} {known:?} snippet={snippet}: {p}");
            assert_eq!((p.form, p.basis), (form, basis), "{what}");
            assert!(p.reason.contains(says), "{what}");
            assert_eq!(p.warns(), basis == Basis::Unknown, "{what}");
        }
        // The one warning says how to tell us.
        let p = pick(Auto, &unknown, false);
        assert!(p.reason.contains("--coredns-version"), "{p}");
        assert!(p.reason.contains("controller.corednsVersion"), "{p}");
    }
}
