//! Prints the C header generated from spec.rs:
//! `cargo run -p masq-proto --bin masq-proto-gen-c > frontend-provider/include/masq_proto.h`
fn main() {
    print!("{}", masq_proto::cgen::header());
}
