//! Any datagram through every decoder: no panic, and whatever is accepted
//! re-encodes to exactly the same bytes (the decoders are canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use masq_proto::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_request(data) {
        assert_eq!(r.encode(), data, "{r:?}");
    }
    if let Ok(r) = decode_reply(data) {
        assert_eq!(r.encode(), data, "{r:?}");
    }
    if let Ok(n) = decode_notice(data) {
        assert_eq!(encode_notice(&n), data, "{n:?}");
    }
    if let Ok(p) = decode_peer(data) {
        assert_eq!(encode_peer(&p), data, "{p:?}");
    }
    let _ = message_len(data);
    if let Err(e) = decode_request(data) {
        let _ = (e.errno(), e.is_fatal(), e.to_string());
    }
    let _ = peek_ids(data);
    let _ = hex::annotate("fuzz", data);
});
