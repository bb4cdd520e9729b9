//! The committed C header must be exactly what the generator prints.
//! `MASQ_PROTO_BLESS=1 cargo test -p masq-proto` rewrites it.

use std::path::PathBuf;

#[test]
fn committed_c_header_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../frontend-provider/include/masq_proto.h");
    let want = masq_proto::cgen::header();
    if std::env::var_os("MASQ_PROTO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir include");
        std::fs::write(&path, &want).expect("write header");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale; regenerate it with\n  cargo run -p masq-proto --bin masq-proto-gen-c > frontend-provider/include/masq_proto.h",
        path.display()
    );
}

/// The masqd-to-masqd messages are not the frontend's business.
#[test]
fn peer_messages_stay_out_of_the_c_header() {
    let h = masq_proto::cgen::header();
    for m in masq_proto::PEER_MESSAGES {
        assert!(!h.contains(&format!("{:#06x}", m.opcode)), "{}", m.name);
    }
    for bad in ["masq_peer", "MASQ_PEER", "PEER_BASE"] {
        assert!(!h.contains(bad), "{bad}");
    }
}
