//! The policy's tcp/udp rules on each endpoint's vNIC, through nftables:
//! one libnftables transaction per policy, so a ruleset is replaced whole
//! or not at all, and removed when masqd stops.

use crate::config::EndpointConfig;
use crate::error::{Error, Result};
use crate::kernel::nft::Nft;
use masq_policy::netpol::PodFlows;
use masq_policy::Policy;

/// The ruleset for every endpoint that names its host interface and bridge;
/// `netpol` gives an endpoint's Kubernetes NetworkPolicy rules when its
/// tenant enforces NetworkPolicy (a second chain: both must accept).
pub fn render(
    policy: &Policy,
    endpoints: &[EndpointConfig],
    netpol: &dyn Fn(&EndpointConfig) -> Option<PodFlows>,
) -> Result<String> {
    let mut text = String::new();
    for e in endpoints {
        if let (Some(host_if), Some(bridge)) = (&e.host_if, &e.bridge) {
            let r = policy
                .render_nft_for(
                    &masq_policy::EndpointRef::new(&e.name, &e.tenant, e.vni, e.vip),
                    host_if,
                    bridge,
                    netpol(e).as_ref(),
                )
                .map_err(|err| Error::Failed(format!("endpoint {}: {err}", e.name)))?;
            text.push_str(&r);
        }
    }
    Ok(text)
}

/// Load a ruleset atomically: one libnftables buffer is one transaction,
/// as `nft -f` makes it.
pub fn load(ruleset: &str) -> Result<()> {
    if ruleset.is_empty() {
        return Ok(());
    }
    Nft::new()
        .and_then(|nft| nft.run(ruleset))
        .map(|_| ())
        .map_err(|e| Error::Failed(format!("nftables refused the ruleset: {e}")))
}

/// Remove the tables masqd made for these endpoints.
pub fn remove(endpoints: &[EndpointConfig]) -> Result<()> {
    let mut text = String::new();
    for e in endpoints.iter().filter(|e| e.host_if.is_some()) {
        let t = masq_policy::table_name(&e.name);
        // Create-then-delete: no error when the table is already gone.
        text.push_str(&format!("table bridge {t}\ndelete table bridge {t}\n"));
    }
    load(&text)
}

#[cfg(test)]
mod tests {
    use super::load;
    use crate::kernel::nft_set::in_new_netns;

    fn bridge_tables() -> String {
        let out = std::process::Command::new("nft")
            .args(["list", "tables", "bridge"])
            .output()
            .expect("nft runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_ruleset_loads_whole_or_not_at_all() {
        in_new_netns(|| {
            load(
                "table bridge masq_fw_a {\n  chain c { type filter hook forward priority 0; }\n}\n",
            )
            .expect("a good ruleset loads");
            assert!(bridge_tables().contains("masq_fw_a"));
            // The second command names a chain that does not exist: the
            // table the first one makes must not stay either.
            let err = load("table bridge masq_fw_b {}\nadd rule bridge masq_fw_b nope drop\n")
                .expect_err("a bad ruleset is refused");
            assert!(
                err.to_string().contains("nftables refused the ruleset"),
                "{err}"
            );
            assert!(
                !bridge_tables().contains("masq_fw_b"),
                "{}",
                bridge_tables()
            );
            assert!(load("").is_ok(), "nothing to load is no error");
        });
    }
}
