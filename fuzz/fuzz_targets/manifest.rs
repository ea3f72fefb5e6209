//! Fuzzes the manifest reader; the properties are in `ouroboros::fuzzing::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ouroboros::fuzzing::manifest(data));
