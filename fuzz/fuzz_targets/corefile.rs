//! Fuzzes the Corefile editor; the properties are in `ouroboros::fuzzing::corefile_edit`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ouroboros::fuzzing::corefile_edit(data));
