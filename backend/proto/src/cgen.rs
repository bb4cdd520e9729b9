//! Generates `frontend-provider/include/masq_proto.h` from `spec.rs`:
//! memcpy-able structs (every field naturally aligned, so no compiler
//! padding; `_Static_assert`ed), `_init` and `_decode` helpers per message,
//! and `_validate` functions that check what the Rust decoder checks except
//! UTF-8 (the frontend only needs the names to be bounded C strings).
//! The masqd-to-masqd messages stay out: see [`peer_only`].

use crate::wire::{Kind, StructDesc};
use crate::{MessageDesc, ALL_STRUCTS, CONSTANTS, MESSAGES, NOTICES};
use std::fmt::Write;

/// Structs named `Peer*` and constants named `PEER_*` belong to the
/// masqd-to-masqd messages, which libmasq never sees: the header has no
/// use for them, and leaving them out keeps it the frontend's contract.
pub fn peer_only(name: &str) -> bool {
    name.starts_with("Peer") || name.starts_with("PEER_")
}

/// The whole header.
pub fn header() -> String {
    let mut s = String::new();
    s.push_str(PROLOGUE);
    for (name, value, doc) in CONSTANTS.iter().filter(|c| !peer_only(c.0)) {
        comment(&mut s, doc, "");
        let v = if *value >= 0x4000 {
            format!("{value:#x}")
        } else {
            value.to_string()
        };
        let _ = writeln!(s, "#define MASQ_{name} {v}");
    }
    s.push('\n');
    for m in MESSAGES {
        let _ = writeln!(s, "#define MASQ_OP_{} {}", upper(m.name), m.opcode);
    }
    for m in NOTICES {
        let _ = writeln!(s, "#define MASQ_NOTICE_{} {:#x}", upper(m.name), m.opcode);
    }
    s.push_str(HELPERS);
    for d in ALL_STRUCTS.iter().filter(|d| !peer_only(d.name)) {
        c_struct(&mut s, d);
    }
    s.push_str(HEADER_FNS);
    for m in MESSAGES {
        let op = format!("MASQ_OP_{}", upper(m.name));
        c_message(&mut s, m, "req", &op, m.request);
        if !crate::is_posted(m.opcode) {
            c_message(&mut s, m, "reply", &format!("({op} | MASQ_REPLY)"), m.reply);
        }
    }
    for m in NOTICES {
        let op = format!("MASQ_NOTICE_{}", upper(m.name));
        c_message(&mut s, m, "notice", &op, m.reply);
    }
    s.push_str("#endif /* MASQ_PROTO_H */\n");
    s
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

pub(crate) fn upper(name: &str) -> String {
    snake(name).to_ascii_uppercase()
}

/// The C struct tag for a wire struct (`Header` keeps the short `hdr`).
fn tag(d: &StructDesc) -> String {
    match d.name {
        "Header" => "masq_hdr".into(),
        n => format!("masq_{}", snake(n)),
    }
}

fn comment(s: &mut String, doc: &str, indent: &str) {
    let lines: Vec<&str> = doc
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.len() {
        0 => {}
        1 => {
            let _ = writeln!(s, "{indent}/* {} */", lines[0]);
        }
        _ => {
            let _ = writeln!(s, "{indent}/*");
            for l in lines {
                let _ = writeln!(s, "{indent} * {l}");
            }
            let _ = writeln!(s, "{indent} */");
        }
    }
}

fn c_decl(kind: &Kind, name: &str) -> String {
    match kind {
        Kind::Int { c_type, .. } => format!("{c_type} {name}"),
        Kind::Struct(d) => format!("struct {} {name}", tag(d)),
        Kind::Bytes(n) | Kind::Reserved(n) => format!("uint8_t {name}[{n}]"),
        Kind::Str(n) => format!("char {name}[{n}]"),
        Kind::Len => format!("uint32_t {name}"),
        Kind::Array { elem, cap, .. } => format!("struct {} {name}[{cap}]", tag(elem)),
        Kind::Blob { cap, .. } => format!("uint8_t {name}[{cap}]"),
    }
}

/// A C condition for an `in` pattern such as `2..=4 | 8..=10 | 255`.
fn c_condition(field: &str, pattern: &str) -> String {
    let num = |t: &str| {
        let t = t.replace('_', "");
        match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => t.parse(),
        }
        .unwrap_or_else(|_| panic!("bad literal {t:?} in pattern {pattern:?}"))
    };
    let alts: Vec<String> = pattern
        .split('|')
        .map(|alt| {
            let alt: String = alt.split_whitespace().collect();
            match alt.split_once("..=") {
                Some((lo, hi)) if num(lo) == 0 => format!("{field} <= {}", hi.replace('_', "")),
                Some((lo, hi)) => format!(
                    "({field} >= {} && {field} <= {})",
                    lo.replace('_', ""),
                    hi.replace('_', "")
                ),
                None => format!("{field} == {}", alt.replace('_', "")),
            }
        })
        .collect();
    format!("({})", alts.join(" || "))
}

fn c_struct(s: &mut String, d: &StructDesc) {
    let t = tag(d);
    s.push('\n');
    comment(s, d.doc, "");
    let _ = writeln!(s, "struct {t} {{");
    for f in d.fields {
        let decl = c_decl(&f.kind, f.name);
        let doc: Vec<&str> = f
            .doc
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if doc.is_empty() {
            let _ = writeln!(s, "\t{decl};");
        } else {
            let _ = writeln!(s, "\t{decl}; /* {} */", doc.join(" "));
        }
    }
    let _ = writeln!(s, "}};");
    let _ = writeln!(
        s,
        "_Static_assert(sizeof(struct {t}) == {}, \"{t}: size\");",
        d.size()
    );
    let mut off = 0;
    for f in d.fields {
        let _ = writeln!(
            s,
            "_Static_assert(offsetof(struct {t}, {}) == {off}, \"{t}.{}: offset\");",
            f.name, f.name
        );
        off += f.kind.size();
    }
    if d.name == "Header" {
        return; // checked by masq_hdr_decode
    }

    let mut body = String::new();
    for f in d.fields {
        let v = format!("s->{}", f.name);
        match &f.kind {
            Kind::Int { .. } => {
                if let Some(p) = f.allowed {
                    let _ = writeln!(body, "\tif (!{})\n\t\treturn -EINVAL;", c_condition(&v, p));
                }
            }
            Kind::Struct(sd) => {
                let _ = writeln!(
                    body,
                    "\tif ({}_validate(&{v}))\n\t\treturn -EINVAL;",
                    tag(sd)
                );
            }
            Kind::Str(_) => {
                let _ = writeln!(
                    body,
                    "\tif (!masq__str_ok({v}, sizeof({v})))\n\t\treturn -EINVAL;"
                );
            }
            Kind::Reserved(_) => {
                let _ = writeln!(
                    body,
                    "\tif (!masq__zero({v}, sizeof({v})))\n\t\treturn -EINVAL;"
                );
            }
            Kind::Bytes(_) | Kind::Len => {}
            Kind::Blob { cap, len } => {
                let n = format!("s->{len}");
                let _ = writeln!(body, "\tif ({n} > {cap})\n\t\treturn -EINVAL;");
                let _ = writeln!(
                    body,
                    "\tif (!masq__zero(&{v}[{n}], {cap} - {n}))\n\t\treturn -EINVAL;"
                );
            }
            Kind::Array { elem, cap, len } => {
                let n = format!("s->{len}");
                let _ = writeln!(body, "\tif ({n} > {cap})\n\t\treturn -EINVAL;");
                let _ = writeln!(
                    body,
                    "\tfor (i = 0; i < {n}; i++)\n\t\tif ({}_validate(&{v}[i]))\n\t\t\treturn -EINVAL;",
                    tag(elem)
                );
                let _ = writeln!(
                    body,
                    "\tif (!masq__zero(&{v}[{n}], ({cap} - {n}) * sizeof({v}[0])))\n\t\treturn -EINVAL;"
                );
            }
        }
    }
    let arrays = d
        .fields
        .iter()
        .any(|f| matches!(f.kind, Kind::Array { .. }));
    let _ = writeln!(
        s,
        "\n/* 0 if every field is within its allowed values, else -EINVAL. */"
    );
    let _ = writeln!(s, "static inline int {t}_validate(const struct {t} *s)\n{{");
    if arrays {
        s.push_str("\tuint32_t i;\n\n");
    }
    if body.is_empty() {
        s.push_str("\t(void)s;\n");
    }
    s.push_str(&body);
    s.push_str("\treturn 0;\n}\n");
}

fn c_message(s: &mut String, m: &MessageDesc, kind: &str, op: &str, body: Option<&StructDesc>) {
    let name = match kind {
        "notice" => format!("masq_msg_{}_notice", snake(m.name)),
        _ => format!("masq_msg_{}_{kind}", snake(m.name)),
    };
    let _ = writeln!(
        s,
        "\n/* {} {kind} (opcode {:#06x}) */",
        upper(m.name),
        m.opcode
    );
    let _ = writeln!(s, "struct {name} {{\n\tstruct masq_hdr hdr;");
    if let Some(b) = body {
        let _ = writeln!(s, "\tstruct {} body;", tag(b));
    }
    let _ = writeln!(s, "}};");
    let size = crate::HEADER_SIZE + body.map_or(0, |b| b.size());
    let _ = writeln!(
        s,
        "_Static_assert(sizeof(struct {name}) == {size}, \"{name}: size\");"
    );
    let _ = writeln!(
        s,
        "\n/* Zeroed, with the header filled in (request_id 0). */\n\
         static inline void {name}_init(struct {name} *m)\n{{\n\
         \tmemset(m, 0, sizeof(*m));\n\
         \tmasq_hdr_init(&m->hdr, {op}, sizeof(*m));\n}}"
    );
    let check = match body {
        Some(b) => format!(
            "\tint err = masq__decode(buf, len, {op}, m, sizeof(*m));\n\n\
             \treturn err ? err : {}_validate(&m->body);\n",
            tag(b)
        ),
        None => format!("\treturn masq__decode(buf, len, {op}, m, sizeof(*m));\n"),
    };
    let _ = writeln!(
        s,
        "\nstatic inline int {name}_decode(const void *buf, size_t len, struct {name} *m)\n{{\n{check}}}"
    );
}

const PROLOGUE: &str = r#"/*
 * masq frontend <-> backend protocol.
 *
 * GENERATED from backend/proto/src/spec.rs by
 *   cargo run -p masq-proto --bin masq-proto-gen-c > frontend-provider/include/masq_proto.h
 * Do not edit; `cargo test -p masq-proto` fails when this file is stale.
 *
 * One message per SOCK_SEQPACKET datagram: struct masq_hdr, then a
 * fixed-size little-endian body. The structs here are the wire layout
 * (natural alignment, explicit reserved bytes), so a message is sent with
 * write(fd, &m, sizeof(m)) after masq_msg_*_init() and received with
 * masq_msg_*_decode(), which checks the framing and every field.
 */
#ifndef MASQ_PROTO_H
#define MASQ_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "masq structs are the little-endian wire layout");

"#;

const HELPERS: &str = r#"
static inline int masq__zero(const void *p, size_t n)
{
	const uint8_t *b = (const uint8_t *)p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* A NUL within the field, and only zeros after it. */
static inline int masq__str_ok(const char *s, size_t n)
{
	const char *nul = (const char *)memchr(s, 0, n);

	return nul && masq__zero(nul, n - (size_t)(nul - s));
}

/*
 * Fill a name field of size n from src: printable ASCII kept, other bytes
 * turned into '?' (names must be UTF-8), cut at n - 1, zero tail.
 */
static inline void masq_copy_name(char *dst, size_t n, const char *src)
{
	size_t i = 0;

	for (; i + 1 < n && src[i]; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	memset(dst + i, 0, n - i);
}
"#;

const HEADER_FNS: &str = r#"
static inline int masq_opcode_is_reply(uint16_t opcode)
{
	return (opcode & MASQ_REPLY) != 0;
}

/* A posted request: the backend sends no reply to it. */
static inline int masq_opcode_is_posted(uint16_t opcode)
{
	return opcode >= MASQ_POSTED_FIRST && opcode <= MASQ_POSTED_LAST;
}

static inline int masq_opcode_is_notice(uint16_t opcode)
{
	return opcode >= MASQ_NOTICE_BASE && opcode < MASQ_REPLY;
}

static inline void masq_hdr_init(struct masq_hdr *h, uint16_t opcode, uint32_t length)
{
	memset(h, 0, sizeof(*h));
	h->version = MASQ_VERSION;
	h->opcode = opcode;
	h->length = length;
}

/* Set the request id of a message that starts with a struct masq_hdr. */
static inline void masq_hdr_set_request_id(void *msg, uint32_t request_id)
{
	memcpy((uint8_t *)msg + offsetof(struct masq_hdr, request_id), &request_id,
	       sizeof(request_id));
}

/*
 * Check the framing of a received datagram of len bytes and copy its
 * header out. 0, -EPROTONOSUPPORT for another version, or -EPROTO.
 */
static inline int masq_hdr_decode(const void *buf, size_t len, struct masq_hdr *h)
{
	if (len < sizeof(*h) || len > MASQ_MAX_MESSAGE)
		return -EPROTO;
	memcpy(h, buf, sizeof(*h));
	if (h->version != MASQ_VERSION)
		return -EPROTONOSUPPORT;
	if (h->length != len)
		return -EPROTO;
	if (h->status > 0 || (h->status < 0 && len != sizeof(*h)))
		return -EPROTO;
	return 0;
}

/*
 * Framing checks for one expected opcode. Returns 0 with the message
 * copied to out; an error reply's (negative) status with only its header
 * copied; or -EPROTO / -EPROTONOSUPPORT.
 */
static inline int masq__decode(const void *buf, size_t len, uint16_t opcode, void *out,
			       size_t size)
{
	struct masq_hdr h;
	int err = masq_hdr_decode(buf, len, &h);

	if (err)
		return err;
	if (h.opcode != opcode)
		return -EPROTO;
	if (h.status < 0) {
		if (!masq_opcode_is_reply(opcode))
			return -EPROTO;
		memcpy(out, &h, sizeof(h));
		return h.status;
	}
	if (masq_opcode_is_notice(opcode) && h.request_id != 0)
		return -EPROTO;
	if (len != size)
		return -EPROTO;
	memcpy(out, buf, size);
	return 0;
}
"#;
