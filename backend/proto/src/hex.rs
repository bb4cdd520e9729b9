//! Golden vectors as annotated hex: one line per field (at most 16 bytes a
//! line) with a `# field` comment, so a layout change shows up in review.
//! `parse` ignores everything after `#`.

use crate::wire::{Kind, StructDesc, Wire};
use crate::{HEADER_SIZE, MESSAGES, NOTICES, NOTICE_BASE, PEER_BASE, PEER_MESSAGES, REPLY};
use std::fmt::Write;

/// The bytes in an annotated hex file.
pub fn parse(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let data = line.split('#').next().unwrap_or("");
        for tok in data.split_whitespace() {
            let b = u8::from_str_radix(tok, 16)
                .ok()
                .filter(|_| tok.len() == 2)
                .ok_or_else(|| format!("line {}: bad byte {tok:?}", n + 1))?;
            out.push(b);
        }
    }
    Ok(out)
}

/// `bytes` (a whole message) as annotated hex under a `# title` line.
pub fn annotate(title: &str, bytes: &[u8]) -> String {
    let mut leaves = Vec::new();
    let hdr = crate::Header::KIND.struct_desc();
    walk(hdr, "hdr", bytes, 0, &mut leaves);
    let body = body_desc(bytes);
    let mut off = HEADER_SIZE;
    if let Some(d) = body.filter(|d| HEADER_SIZE + d.size() == bytes.len()) {
        walk(d, "body", bytes, off, &mut leaves);
        off = bytes.len();
    }
    if off < bytes.len() {
        leaves.push(("(unknown)".to_string(), off, bytes.len()));
    }

    let mut s = format!("# {title}\n");
    for (name, start, end) in leaves {
        let chunk = bytes.get(start..end).unwrap_or(&[]);
        for (i, line) in chunk.chunks(16).enumerate() {
            let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
            let hex = hex.join(" ");
            if i == 0 {
                let _ = writeln!(s, "{hex:<48}# {name}");
            } else {
                let _ = writeln!(s, "{hex}");
            }
        }
    }
    s
}

fn body_desc(bytes: &[u8]) -> Option<&'static StructDesc> {
    let (op, _) = crate::peek_ids(bytes);
    let status = bytes
        .get(12..16)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if op & REPLY != 0 {
        let m = MESSAGES.iter().find(|m| m.opcode == op & !REPLY)?;
        return if status == Some(0) { m.reply } else { None };
    }
    if op >= NOTICE_BASE {
        return NOTICES.iter().find(|m| m.opcode == op)?.reply;
    }
    if op >= PEER_BASE {
        return PEER_MESSAGES.iter().find(|m| m.opcode == op)?.request;
    }
    MESSAGES.iter().find(|m| m.opcode == op)?.request
}

type Leaf = (String, usize, usize);

fn walk(d: &StructDesc, prefix: &str, bytes: &[u8], mut off: usize, out: &mut Vec<Leaf>) {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for f in d.fields {
        let name = format!("{prefix}.{}", f.name);
        let size = f.kind.size();
        match f.kind {
            Kind::Struct(sd) => walk(sd, &name, bytes, off, out),
            Kind::Array { elem, cap, len } => {
                let used = counts
                    .iter()
                    .find(|(n, _)| *n == len)
                    .map_or(cap, |c| c.1)
                    .min(cap);
                for i in 0..used {
                    walk(
                        elem,
                        &format!("{name}[{i}]"),
                        bytes,
                        off + i * elem.size(),
                        out,
                    );
                }
                if used < cap {
                    let start = off + used * elem.size();
                    out.push((format!("{name}[{used}..{cap}] (unused)"), start, off + size));
                }
            }
            _ => {
                if let Kind::Len = f.kind {
                    let v = bytes
                        .get(off..off + 4)
                        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    counts.push((f.name, v as usize));
                }
                out.push((name, off, off + size));
            }
        }
        off += size;
    }
}
