//! Golden files: output compared with a committed file, which `UPDATE_GOLDEN=1` (re)writes.

use std::fs;
use std::path::Path;

pub fn check(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, actual).unwrap();
        return;
    }
    let want = fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert!(
        want == actual,
        "{} differs from the output (UPDATE_GOLDEN=1 rewrites it)\n--- golden\n{want}\n--- actual\n{actual}",
        path.display()
    );
}
