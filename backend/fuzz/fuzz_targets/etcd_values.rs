//! An etcd key and value as any writer of the store may leave them:
//! decoded to an error or to what masqd uses, never a panic
//! (masq_backend::fuzz::etcd_values says what is checked).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| masq_backend::fuzz::etcd_values(data));
