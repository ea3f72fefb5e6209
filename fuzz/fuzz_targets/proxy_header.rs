//! Fuzzes the PROXY-protocol decoder (v1 and v2); the properties are in `ouroboros::fuzzing::proxy_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ouroboros::fuzzing::proxy_header(data));
