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
