//! PURE: the DNS name rules every flag and object name check shares, so each validator is one
//! call instead of its own loop over labels. (`hostname` applies the stricter policy of what may
//! be hairpinned on top of these.)

/// What [`is_label`] accepts, in the words error messages use.
pub const LABEL_SYNTAX: &str = "lowercase a-z, 0-9 and inner '-', at most 63 characters";

/// An RFC 1123 label as Kubernetes names use it (DNS-1123 label): 1 to 63 of `a-z`, `0-9` and
/// `-`, not starting or ending with `-`.
pub fn is_label(s: &str) -> bool {
    is_ldh(s, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
    })
}

/// A DNS-1123 label that starts with a letter (DNS-1035): what a Service name must be.
pub fn is_dns1035_label(s: &str) -> bool {
    is_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// Dot-separated DNS-1123 labels, at most 253 characters (DNS-1123 subdomain).
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

/// A host name as a user types it: dot-separated labels of letters of either case, digits and
/// `-` (and `_` where `underscore`, as SRV-style names use it), no label starting or ending
/// with `-`, at most 253 characters. No trailing dot.
pub fn is_hostname(s: &str, underscore: bool) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            is_ldh(l, |b| {
                b.is_ascii_alphanumeric() || b == b'-' || (underscore && b == b'_')
            })
        })
}

fn is_ldh(l: &str, allowed: impl Fn(u8) -> bool) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.bytes().all(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        for (s, label, dns1035, subdomain, hostname) in [
            ("a", true, true, true, true),
            ("1password", true, false, true, true),
            ("a-b", true, true, true, true),
            ("-a", false, false, false, false),
            ("a-", false, false, false, false),
            ("A", false, false, false, true),
            ("a.b", false, false, true, true),
            ("a..b", false, false, false, false),
            ("a_b", false, false, false, false),
            ("", false, false, false, false),
            (long.as_str(), true, true, true, true),
            (too_long.as_str(), false, false, false, false),
        ] {
            assert_eq!(is_label(s), label, "{s:?} label");
            assert_eq!(is_dns1035_label(s), dns1035, "{s:?} 1035");
            assert_eq!(is_subdomain(s), subdomain, "{s:?} subdomain");
            assert_eq!(is_hostname(s, false), hostname, "{s:?} hostname");
        }
        assert!(is_hostname("_http._tcp.example.com", true));
        assert!(!is_hostname("_http._tcp.example.com", false));
        assert!(
            !is_hostname(&format!("{long}.{long}.{long}.{long}"), false),
            "over 253"
        );
    }
}
