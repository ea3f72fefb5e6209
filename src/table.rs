//! For table tests whose rows expect either a value or an error that names something.

use std::fmt::Debug;

/// Asserts that `got` is `Ok` and equal to `want`'s value, or an `Err` whose message contains
/// `want`'s text; `row` names the row in the failure.
#[track_caller]
pub fn expect<T, W>(got: &Result<T, String>, want: &Result<W, &str>, row: impl Debug)
where
    T: Debug + PartialEq<W>,
    W: Debug,
{
    match want {
        Ok(w) => assert!(
            matches!(got, Ok(g) if g == w),
            "{row:?}: got {got:?}, want Ok({w:?})"
        ),
        Err(text) => assert!(
            got.as_ref().is_err_and(|e| e.contains(text)),
            "{row:?}: got {got:?}, want an error containing {text:?}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::expect;

    #[test]
    fn matching_rows_pass() {
        expect(&Ok::<_, String>("a".to_string()), &Ok("a"), "value");
        expect(
            &Err::<String, _>("no port 80".into()),
            &Err::<&str, _>("port 80"),
            "error",
        );
    }

    #[test]
    #[should_panic(expected = "want Ok(\"b\")")]
    fn another_value_fails() {
        expect(&Ok::<_, String>("a".to_string()), &Ok("b"), "row");
    }

    #[test]
    #[should_panic(expected = "want an error containing \"port 443\"")]
    fn another_error_fails() {
        expect(
            &Err::<String, _>("no port 80".into()),
            &Err::<&str, _>("port 443"),
            "row",
        );
    }

    #[test]
    #[should_panic(expected = "want an error")]
    fn a_value_where_an_error_is_wanted_fails() {
        expect(
            &Ok::<_, String>("a".to_string()),
            &Err::<&str, _>("a"),
            "row",
        );
    }
}
