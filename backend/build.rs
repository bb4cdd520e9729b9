//! Records which commit masqd is built from, for `masq_build_info`'s
//! `commit` label: `MASQ_COMMIT` if the builder sets it (a build from a
//! tarball that knows its commit), else `git rev-parse --short HEAD` when
//! this crate sits in a git checkout of masq, else `unknown`. A build
//! never fails for want of git.
//!
//! Also compiles the backstop's eBPF programs (`bpf/backstop.bpf.c`) with
//! clang into `OUT_DIR`, which `kernel/bpf_backstop.rs` embeds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MASQ_COMMIT");
    let commit = match std::env::var("MASQ_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => from_git().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=MASQ_COMMIT={commit}");
    compile_bpf();
}

fn compile_bpf() {
    let src = "bpf/backstop.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The kernel's uapi headers include <asm/types.h>, which Debian keeps
    // under the target's multiarch directory.
    let multiarch = Command::new("gcc")
        .arg("-print-multiarch")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "x86_64-linux-gnu".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", src, "-o"])
        .arg(out.join("backstop.bpf.o"))
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} could not compile {src} ({s})"),
        Err(e) => panic!(
            "cannot run {clang} to compile {src}: {e} (`make deps-build` installs clang and libbpf-dev)"
        ),
    }
}

fn from_git() -> Option<String> {
    let crate_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    // The checkout must be masq's own (the workspace above this crate), not
    // some repository an unpacked tarball happens to sit in.
    let top = PathBuf::from(git(&crate_dir, &["rev-parse", "--show-toplevel"])?);
    let workspace = crate_dir.parent()?;
    if top.canonicalize().ok()? != workspace.canonicalize().ok()? {
        return None;
    }
    let commit = git(&crate_dir, &["rev-parse", "--short", "HEAD"])?;
    // Build again when HEAD moves: a commit, a checkout, a new branch tip.
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = git(&crate_dir, &["rev-parse", "--git-path", p]) {
            println!("cargo:rerun-if-changed={}", crate_dir.join(path).display());
        }
    }
    if let Some(branch) = git(&crate_dir, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&crate_dir, &["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={}", crate_dir.join(path).display());
        }
    }
    Some(commit)
}
