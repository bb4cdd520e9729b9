//! The policy's tcp/udp rules on each endpoint's vNIC, through nftables:
//! one `nft -f` transaction per policy, so a ruleset is replaced whole or
//! not at all, and removed when masqd stops.

use crate::config::EndpointConfig;
use masq_policy::Policy;
use std::io::{self, Write};
use std::process::{Command, Stdio};

/// The ruleset for every endpoint that names its host interface and bridge.
pub fn render(policy: &Policy, endpoints: &[EndpointConfig]) -> Result<String, String> {
    let mut text = String::new();
    for e in endpoints {
        if let (Some(host_if), Some(bridge)) = (&e.host_if, &e.bridge) {
            let r = policy
                .render_nft_for(
                    &masq_policy::EndpointRef::new(&e.name, &e.tenant, e.vni, e.vip),
                    host_if,
                    bridge,
                )
                .map_err(|err| format!("endpoint {}: {err}", e.name))?;
            text.push_str(&r);
        }
    }
    Ok(text)
}

/// Load a ruleset atomically.
pub fn load(ruleset: &str) -> io::Result<()> {
    if ruleset.is_empty() {
        return Ok(());
    }
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run nft: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(ruleset.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "nft -f failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Remove the tables masqd made for these endpoints.
pub fn remove(endpoints: &[EndpointConfig]) -> io::Result<()> {
    let mut text = String::new();
    for e in endpoints.iter().filter(|e| e.host_if.is_some()) {
        let t = masq_policy::table_name(&e.name);
        // Create-then-delete: no error when the table is already gone.
        text.push_str(&format!("table bridge {t}\ndelete table bridge {t}\n"));
    }
    load(&text)
}
