//! The CM link's stream from two peer hosts into a CM with listeners and
//! connects in flight (masq_backend::fuzz::peer_stream says what is
//! checked).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| masq_backend::fuzz::peer_stream(data));
