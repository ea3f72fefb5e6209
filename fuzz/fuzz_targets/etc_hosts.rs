//! Fuzzes the hosts-file editor; the properties are in `ouroboros::fuzzing::etc_hosts_edit`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ouroboros::fuzzing::etc_hosts_edit(data));
