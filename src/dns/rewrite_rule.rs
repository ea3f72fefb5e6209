//! PURE: the `name` rules of CoreDNS's `rewrite` plugin found outside our block, and which
//! hairpinned names they take. Other tools (hairpin-proxy, hand-made fixes) leave lines such as
//! `rewrite name www.example.com hairpin-proxy.hairpin-proxy.svc.cluster.local` in the root
//! block. CoreDNS runs `rewrite` before `template` whatever the Corefile's order (plugin.cfg
//! fixes the chain), so such a rule changes the query before our answer can match it: the name
//! is answered with the old tool's Service, or with nothing once that is gone.
//!
//! Matching follows the plugin's documented semantics: a rule is `name [TYPE] FROM TO [...]`,
//! TYPE one of `exact` (the default), `prefix`, `suffix`, `substring`, `regex`, compared with
//! the query's name in lower case, which CoreDNS sees fully qualified (`www.example.com.`).

use regex::Regex;

/// One `name` rule: how it matches and what.
#[derive(Clone, Debug)]
pub struct NameRule {
    matcher: Matcher,
    /// The rule as written (`name exact www.example.com other.svc.cluster.local`), for messages.
    pub text: String,
}

#[derive(Clone, Debug)]
enum Matcher {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Substring(String),
    Regex(Regex),
}

impl NameRule {
    /// The rule of a `rewrite` directive's arguments after an optional `continue`/`stop`, when
    /// they are a `name` rule; `None` for the plugin's other fields (`type`, `edns0`, `ttl`, ...)
    /// and for a rule CoreDNS itself would refuse (a regexp that does not compile, a missing
    /// argument).
    pub fn parse(args: &[&str]) -> Option<NameRule> {
        let args = match args.first() {
            Some(&"continue" | &"stop") => &args[1..],
            _ => args,
        };
        let [field, rest @ ..] = args else {
            return None;
        };
        if !field.eq_ignore_ascii_case("name") {
            return None;
        }
        let (kind, from) = match rest {
            [kind, from, _to, ..]
                if matches!(*kind, "exact" | "prefix" | "suffix" | "substring" | "regex") =>
            {
                (*kind, *from)
            }
            [from, _to, ..] => ("exact", *from),
            _ => return None,
        };
        let lower = from.to_ascii_lowercase();
        let matcher = match kind {
            "exact" => Matcher::Exact(fqdn(&lower)),
            "prefix" => Matcher::Prefix(lower),
            "suffix" => Matcher::Suffix(lower),
            "substring" => Matcher::Substring(lower),
            _ => Matcher::Regex(Regex::new(from).ok()?),
        };
        Some(NameRule {
            matcher,
            text: args.join(" "),
        })
    }

    /// Whether the rule takes queries for `host` (a hairpinned name as written, `*.example.com`
    /// standing for the names under it).
    pub fn matches(&self, host: &str) -> bool {
        let name = fqdn(&host.to_ascii_lowercase());
        // A suffix or substring written without the final dot matches the same names.
        let bare = &name[..name.len() - 1];
        match &self.matcher {
            Matcher::Exact(from) => name == *from,
            Matcher::Prefix(from) => name.starts_with(from.as_str()),
            Matcher::Suffix(from) => name.ends_with(from.as_str()) || bare.ends_with(from.as_str()),
            Matcher::Substring(from) => name.contains(from.as_str()),
            Matcher::Regex(re) => re.is_match(&name) || re.is_match(bare),
        }
    }
}

fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules_match_as_the_rewrite_plugin_does() {
        // (rule arguments, host, matches)
        let cases: &[(&str, &str, bool)] = &[
            // hairpin-proxy's form: exact by default.
            (
                "name www.example.com hp.hp.svc.cluster.local",
                "www.example.com",
                true,
            ),
            (
                "name www.example.com hp.hp.svc.cluster.local",
                "WWW.Example.com",
                true,
            ),
            (
                "name www.example.com. hp.hp.svc.cluster.local.",
                "www.example.com",
                true,
            ),
            (
                "name www.example.com hp.hp.svc.cluster.local",
                "a.www.example.com",
                false,
            ),
            (
                "stop name exact api.example.com x.svc.cluster.local",
                "api.example.com",
                true,
            ),
            (
                "continue name exact api.example.com x",
                "api.example.com",
                true,
            ),
            (
                "name suffix .example.com .svc.cluster.local",
                "shop.example.com",
                true,
            ),
            (
                "name suffix example.com. svc.cluster.local.",
                "shop.example.com",
                true,
            ),
            (
                "name suffix .example.org .svc.cluster.local",
                "shop.example.com",
                false,
            ),
            ("name prefix www. web.", "www.example.com", true),
            ("name prefix www. web.", "shop.example.com", false),
            ("name substring example x", "shop.example.com", true),
            (
                r"name regex (.*)\.example\.com {1}.svc.cluster.local answer auto",
                "shop.example.com",
                true,
            ),
            (
                r"name regex ^shop\.example\.com\.$ x",
                "shop.example.com",
                true,
            ),
            (r"name regex ^api\. x", "shop.example.com", false),
            // A wildcard host stands for the names under it.
            (
                "name suffix .example.com .svc.cluster.local",
                "*.example.com",
                true,
            ),
            // Not name rules, or rules CoreDNS refuses.
            ("type ANY HINFO", "www.example.com", false),
            ("edns0 local set 0xffee abc", "www.example.com", false),
            ("name www.example.com", "www.example.com", false),
            ("name regex ( x", "www.example.com", false),
        ];
        for (args, host, want) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let got = NameRule::parse(&args).is_some_and(|r| r.matches(host));
            assert_eq!(got, *want, "rewrite {} for {host}", args.join(" "));
        }
    }

    #[test]
    fn the_rule_text_drops_continue_and_stop() {
        let rule = NameRule::parse(&["stop", "name", "exact", "a.example.com", "b"]).unwrap();
        assert_eq!(rule.text, "name exact a.example.com b");
    }
}
