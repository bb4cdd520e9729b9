//! The CM exchange between masqds: one JSON line per message over TCP on
//! the underlay (`cm.port`), accepted only from hosts in the VPC map.
//! Sending never blocks a request: messages are queued to one sender
//! thread, which (re)connects to each peer on demand. Messages for this
//! host's own endpoints take the same queue, so order is kept and no CM
//! lock is re-entered.

use crate::cm::PeerMsg;
use crate::state::Shared;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Longest line a peer may send: far above any CM message.
const MAX_LINE: u64 = 16 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

fn known_hosts(shared: &Shared) -> BTreeSet<Ipv4Addr> {
    shared.registry.hosts().into_iter().collect()
}

/// Bind the CM port and start the listener and sender threads.
pub fn start(shared: &Arc<Shared>) -> io::Result<()> {
    let own = shared.cfg.underlay.ip;
    let addr = SocketAddr::new(IpAddr::V4(own), shared.cfg.cm.port);
    let listener = TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("CM link: cannot listen on {addr}: {e}")))?;
    let (tx, rx) = mpsc::channel();
    shared.cm.set_link(tx);
    {
        let shared = shared.clone();
        thread::Builder::new()
            .name("cm-send".into())
            .spawn(move || sender(shared, rx))?;
    }
    {
        let shared = shared.clone();
        thread::Builder::new()
            .name("cm-listen".into())
            .spawn(move || accept_loop(shared, listener))?;
    }
    {
        let shared = shared.clone();
        thread::Builder::new()
            .name("cm-timer".into())
            .spawn(move || {
                while !shared.is_stopping() {
                    thread::sleep(Duration::from_millis(100));
                    shared.cm.expire();
                }
            })?;
    }
    info!(%addr, "CM link listening");
    Ok(())
}

fn sender(shared: Arc<Shared>, rx: mpsc::Receiver<(Ipv4Addr, PeerMsg)>) {
    let own = shared.cfg.underlay.ip;
    let port = shared.cfg.cm.port;
    let mut links: BTreeMap<Ipv4Addr, TcpStream> = BTreeMap::new();
    for (host, msg) in rx {
        if host == own {
            shared.cm.on_peer(&*shared, own, msg);
            continue;
        }
        let mut line = match serde_json::to_vec(&msg) {
            Ok(l) => l,
            Err(e) => {
                warn!("CM message not encodable: {e}");
                continue;
            }
        };
        line.push(b'\n');
        // One retry on a fresh connection: the old one may have died with
        // the peer's restart.
        let mut sent = false;
        for _ in 0..2 {
            if let std::collections::btree_map::Entry::Vacant(slot) = links.entry(host) {
                let to = SocketAddr::new(IpAddr::V4(host), port);
                match TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
                        slot.insert(s);
                    }
                    Err(e) => {
                        warn!(%to, "CM link: cannot connect: {e}");
                        break;
                    }
                }
            }
            if let Some(s) = links.get_mut(&host) {
                if s.write_all(&line).is_ok() {
                    sent = true;
                    break;
                }
                links.remove(&host);
            }
        }
        if !sent {
            // The app sees what a lost CM packet gives: a timeout.
            warn!(%host, "CM message lost");
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.is_stopping() {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!("CM link: accept failed: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let from = match stream.peer_addr() {
            Ok(SocketAddr::V4(a)) => *a.ip(),
            _ => continue,
        };
        if !known_hosts(&shared).contains(&from) {
            warn!(%from, "CM link: connection from a host not in the VPC map; closed");
            continue;
        }
        let shared = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("cm-from-{from}"))
            .spawn(move || receive(shared, from, stream));
        if let Err(e) = spawned {
            warn!("CM link: cannot start a reader: {e}");
        }
    }
}

fn receive(shared: Arc<Shared>, from: Ipv4Addr, stream: TcpStream) {
    debug!(%from, "CM link up");
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.last() != Some(&b'\n') => {
                warn!(%from, "CM link: over-long or cut message; closing");
                break;
            }
            Ok(_) => match serde_json::from_slice::<PeerMsg>(&line) {
                Ok(msg) => shared.cm.on_peer(&*shared, from, msg),
                Err(e) => warn!(%from, "CM link: malformed message dropped: {e}"),
            },
            Err(e) => {
                debug!(%from, "CM link: {e}");
                break;
            }
        }
    }
    debug!(%from, "CM link down");
}
