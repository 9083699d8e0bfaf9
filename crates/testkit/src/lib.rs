//! `keel-testkit`: what the test suites of Keel's crates share (a
//! dev-dependency only): free ports, and Debian's `redis-server` for
//! interop tests ([`redis`]).

pub mod redis;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports are picked from here up to the kernel's ephemeral range.
const LOWEST: u16 = 10_000;

/// A free TCP port on loopback (bound, then released), never one handed out
/// before in this process, and below the kernel's ephemeral range.
///
/// The tests of a binary run in parallel: two servers started on one port
/// would each pass a readiness check against whichever bound it. And a port
/// the kernel picks for a bind to port 0 lies in the ephemeral range, which
/// outgoing connections draw their source ports from too: one of a suite's
/// own client connections took such a port before the server meant for it
/// could bind it ("Address already in use").
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let ephemeral_from = ephemeral_from();
    loop {
        let port = if ephemeral_from > LOWEST + 1000 {
            // A fresh RandomState is seeded anew: a random pick, so that
            // test processes running side by side rarely try the same port.
            let random = RandomState::new().hash_one(0u8);
            let port = LOWEST + (random % u64::from(ephemeral_from - LOWEST)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            port
        } else {
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
        };
        let mut given = GIVEN.lock().expect("the ports given");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_from() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
        for port in ports {
            assert!((LOWEST..ephemeral_from()).contains(&port), "{port}");
            TcpListener::bind(("127.0.0.1", port)).expect("still free");
        }
    }
}
