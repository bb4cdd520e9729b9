//! nftables through its own library, libnftables (the code behind the `nft`
//! command), for rulesets, listings and rewrites: spawning `nft` would put
//! a process start on every endpoint and policy change. One context,
//! behind a mutex; every call is one netlink transaction, so a command
//! buffer is applied whole or not at all, as with `nft -f`. Set elements
//! changed per connection go by netlink instead (`nft_set`).

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;

// libnftables1 ships only the versioned name; linking it verbatim means
// building masqd needs no -dev package.
#[link(name = "libnftables.so.1", kind = "dylib", modifiers = "+verbatim")]
extern "C" {
    fn nft_ctx_new(flags: u32) -> *mut c_void;
    fn nft_ctx_free(ctx: *mut c_void);
    fn nft_ctx_buffer_output(ctx: *mut c_void) -> c_int;
    fn nft_ctx_buffer_error(ctx: *mut c_void) -> c_int;
    fn nft_ctx_get_output_buffer(ctx: *mut c_void) -> *const c_char;
    fn nft_ctx_get_error_buffer(ctx: *mut c_void) -> *const c_char;
    fn nft_ctx_output_set_flags(ctx: *mut c_void, flags: u32);
    fn nft_run_cmd_from_buffer(ctx: *mut c_void, buf: *const c_char) -> c_int;
}

/// enum nft_output_flags in libnftables.h.
const NFT_CTX_OUTPUT_JSON: u32 = 1 << 4;
const NFT_CTX_OUTPUT_TERSE: u32 = 1 << 11;

struct Ctx(*mut c_void);

// The context is only ever used under the mutex.
unsafe impl Send for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by nft_ctx_new and freed once.
        unsafe { nft_ctx_free(self.0) }
    }
}

pub struct Nft {
    ctx: Mutex<Ctx>,
}

impl Nft {
    /// A context whose output is JSON (for listings) and whose output and
    /// errors are captured rather than printed.
    pub fn new() -> Result<Nft> {
        // SAFETY: plain constructor; null means failure.
        let ctx = unsafe { nft_ctx_new(0) };
        if ctx.is_null() {
            return Err(Error::failed("libnftables: cannot create a context"));
        }
        let ctx = Ctx(ctx);
        // SAFETY: valid context.
        unsafe {
            if nft_ctx_buffer_output(ctx.0) != 0 || nft_ctx_buffer_error(ctx.0) != 0 {
                return Err(Error::failed("libnftables: cannot buffer output"));
            }
            nft_ctx_output_set_flags(ctx.0, NFT_CTX_OUTPUT_JSON);
        }
        Ok(Nft {
            ctx: Mutex::new(ctx),
        })
    }

    /// Run a command buffer (nft syntax) as one transaction; returns what
    /// nft printed (JSON for list commands).
    pub fn run(&self, commands: &str) -> Result<String> {
        self.run_with(commands, NFT_CTX_OUTPUT_JSON)
    }

    /// `run` whose listings leave the sets' elements out (`nft -t`): what
    /// sets there are, without reading what may be thousands of elements.
    pub fn run_terse(&self, commands: &str) -> Result<String> {
        self.run_with(commands, NFT_CTX_OUTPUT_JSON | NFT_CTX_OUTPUT_TERSE)
    }

    fn run_with(&self, commands: &str, flags: u32) -> Result<String> {
        let buf =
            CString::new(commands).map_err(|_| Error::failed("nft commands contain a NUL byte"))?;
        let ctx = self.ctx.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: valid context and NUL-terminated buffer; the returned
        // buffers stay valid until the next call on this context, and we
        // copy them while holding the lock. The flags are put back before
        // the lock is released.
        unsafe {
            nft_ctx_output_set_flags(ctx.0, flags);
            let rc = nft_run_cmd_from_buffer(ctx.0, buf.as_ptr());
            nft_ctx_output_set_flags(ctx.0, NFT_CTX_OUTPUT_JSON);
            let out = text(nft_ctx_get_output_buffer(ctx.0));
            let err = text(nft_ctx_get_error_buffer(ctx.0));
            if rc == 0 {
                Ok(out)
            } else {
                Err(Error::Failed(if err.trim().is_empty() {
                    format!("nft failed (code {rc})")
                } else {
                    err.trim().to_string()
                }))
            }
        }
    }
}

unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libnftables returns NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The part of nftables names (chain, set, counter) that is the endpoint's.
pub fn nft_id(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_comes_back_as_text() {
        let nft = Nft::new().expect("libnftables context");
        // Parsing fails before any netlink access, so this runs unprivileged.
        let err = nft.run("this is not nft\n").expect_err("must fail");
        assert!(err.to_string().contains("syntax error"), "{err}");
    }
}
