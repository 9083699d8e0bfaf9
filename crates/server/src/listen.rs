//! Sockets: the listeners on `port`, `tls-port` and `memcached-port` (one
//! SO_REUSEPORT listener per worker on each `bind` address) and on
//! `metrics-port` (the metrics thread's), their replacement when CONFIG
//! SET changes one of them or `bind`, the plain ones of the cluster bus,
//! and outgoing connections from `bind-source-addr`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use mio::net::TcpListener;
use parking_lot::Mutex;
use socket2::{Domain, Socket, Type};

use crate::config::Config;

/// One worker's listeners on one port, which its event loop accepts on and
/// CONFIG SET replaces.
pub type SharedListeners = Arc<Mutex<Vec<TcpListener>>>;

/// Every worker's listeners on one port of the settings (`port`,
/// `memcached-port`, `metrics-port`: its one thread counts as one
/// worker), with the registry each is polled through: CONFIG SET
/// swaps them from the thread that runs the command, so that when it
/// answers OK the old port refuses connections and the new one accepts
/// them (Redis's changeListenPort).
pub struct PortListeners {
    /// The port of the settings they listen on.
    port: fn(&Config) -> u16,
    /// The poll token of a worker's `i`th listener.
    token: fn(usize) -> mio::Token,
    workers: Mutex<Vec<(mio::Registry, SharedListeners)>>,
}

impl PortListeners {
    pub fn new(port: fn(&Config) -> u16, token: fn(usize) -> mio::Token) -> PortListeners {
        PortListeners { port, token, workers: Mutex::default() }
    }

    /// A worker's listeners, as bound at start, join: registered with
    /// `registry`, and shared with the worker, which accepts on them.
    pub fn attach(&self, registry: mio::Registry, mut bound: Vec<TcpListener>) -> io::Result<SharedListeners> {
        for (i, l) in bound.iter_mut().enumerate() {
            registry.register(l, (self.token)(i), mio::Interest::READABLE)?;
        }
        let shared = Arc::new(Mutex::new(bound));
        self.workers.lock().push((registry, shared.clone()));
        Ok(shared)
    }

    /// The workers' listeners on `port`.
    pub fn resp() -> PortListeners {
        PortListeners::new(|c| c.port, crate::worker::tcp_listener_token)
    }

    /// The workers' listeners on `memcached-port`.
    pub fn memcache() -> PortListeners {
        PortListeners::new(|c| c.memcached_port, crate::worker::memcache_listener_token)
    }

    /// The workers' listeners on `tls-port`.
    pub fn tls() -> PortListeners {
        PortListeners::new(|c| c.tls.port, crate::worker::tls_listener_token)
    }

    /// The metrics thread's on `metrics-port`.
    pub fn metrics() -> PortListeners {
        PortListeners::new(|c| c.metrics_port, mio::Token)
    }

    /// The port of `config` these listen on.
    pub fn port(&self, config: &Config) -> u16 {
        (self.port)(config)
    }

    /// Whether going from `old` to `next` moves these listeners.
    pub fn moves(&self, old: &Config, next: &Config) -> bool {
        ((self.port)(old), &old.bind) != ((self.port)(next), &next.bind)
    }

    /// Closes every listener on `old`'s port and addresses and listens
    /// on `next`'s, as Redis does: the old ones close first (so `bind`
    /// may move between overlapping addresses), and if the new ones cannot
    /// all be bound, the old ones are bound again and the error returned.
    pub fn rebind(&self, old: &Config, next: &Config) -> io::Result<()> {
        let workers = self.workers.lock();
        let mut held: Vec<_> = workers.iter().map(|(_, l)| l.lock()).collect();
        for ((registry, _), listeners) in workers.iter().zip(held.iter_mut()) {
            for mut l in listeners.drain(..) {
                let _ = registry.deregister(&mut l);
            }
        }
        let (bound, result) = match bind_on(next, (self.port)(next), workers.len()) {
            Ok(bound) => (bound, Ok(())),
            Err(e) => {
                let restored = bind_on(old, (self.port)(old), workers.len()).unwrap_or_else(|again| {
                    tracing::warn!("Could not listen again on port {}: {again}", (self.port)(old));
                    Vec::new()
                });
                (restored, Err(e))
            }
        };
        for (((registry, _), listeners), mut new) in workers.iter().zip(held.iter_mut()).zip(bound) {
            for (i, l) in new.iter_mut().enumerate() {
                registry.register(l, (self.token)(i), mio::Interest::READABLE)?;
            }
            **listeners = new;
        }
        result
    }
}

/// The workers' listeners on `port`, none when it is 0.
pub fn bind_on(config: &Config, port: u16, workers: usize) -> io::Result<Vec<Vec<TcpListener>>> {
    match port {
        0 => Ok((0..workers).map(|_| Vec::new()).collect()),
        port => bind_everywhere(config, port, workers),
    }
}

/// One blocking listener on each `bind` address for `port` (a port served
/// by a thread of its own, not by the workers).
pub fn bind_plain(config: &Config, port: u16) -> io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::new();
    for addr in &config.bind {
        let (optional, addr) = match addr.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, addr.as_str()),
        };
        let ip = bind_ip(addr)?;
        match std::net::TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(l) => {
                mark(&socket2::SockRef::from(&l), config.socket_mark_id);
                listeners.push(l);
            }
            Err(e) if optional => tracing::warn!("could not bind optional address {ip}:{port}: {e}"),
            Err(e) => return Err(listen_failed(SocketAddr::new(ip, port), e)),
        }
    }
    Ok(listeners)
}

/// A `bind` address (its `-` for optional already taken off).
fn bind_ip(addr: &str) -> io::Result<IpAddr> {
    match addr {
        "*" => "0.0.0.0".parse().map_err(io::Error::other),
        "::*" => "::".parse().map_err(io::Error::other),
        a => a.parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("bind {a}: {e}"))),
    }
}

/// One SO_REUSEPORT listener per worker on each `bind` address for `port`:
/// the listeners of each worker, in `bind`'s order.
pub fn bind_everywhere(config: &Config, port: u16, workers: usize) -> io::Result<Vec<Vec<TcpListener>>> {
    let mut per_worker: Vec<Vec<TcpListener>> = (0..workers).map(|_| Vec::new()).collect();
    for addr in &config.bind {
        let (optional, addr) = match addr.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, addr.as_str()),
        };
        let sockaddr = SocketAddr::new(bind_ip(addr)?, port);
        // SO_REUSEPORT would let a second server join this port's group
        // silently; a plain bind first fails as Redis does if it is taken.
        if let Err(e) = probe_bind(sockaddr) {
            if optional {
                tracing::warn!("could not bind optional address {sockaddr}: {e}");
                continue;
            }
            return Err(listen_failed(sockaddr, e));
        }
        for listeners in per_worker.iter_mut() {
            match reuseport_listener(sockaddr, config.tcp_backlog, config.socket_mark_id) {
                Ok(l) => listeners.push(l),
                Err(e) if optional => {
                    tracing::warn!("could not bind optional address {sockaddr}: {e}");
                    break;
                }
                Err(e) => return Err(listen_failed(sockaddr, e)),
            }
        }
    }
    Ok(per_worker)
}

/// Redis's words: scripts (Redis's test harness among them) retry on
/// another port when they read "Failed listening on port".
fn listen_failed(addr: SocketAddr, e: io::Error) -> io::Error {
    tracing::warn!("Warning: Could not create server TCP listening socket {addr}: {e}");
    io::Error::new(e.kind(), format!("Failed listening on port {} (TCP), aborting.", addr.port()))
}

/// Binds `addr` with SO_REUSEADDR only (a port in TIME_WAIT is fine, a
/// port another server listens on is not), then lets it go. It never
/// listens: a client connecting in that instant would be accepted into
/// this socket's backlog and then reset.
fn probe_bind(addr: SocketAddr) -> io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())
}

fn reuseport_listener(addr: SocketAddr, backlog: i32, mark_id: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    mark(&socket, mark_id);
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(TcpListener::from_std(socket.into()))
}

/// `socket-mark-id`: the listener's `SO_MARK`, which the connections it
/// accepts inherit. As Redis's, a mark the system refuses (it takes
/// CAP_NET_ADMIN) leaves the socket unmarked, silently.
fn mark(socket: &Socket, id: u32) {
    if id > 0 {
        let _ = socket.set_mark(id);
    }
}

/// A socket for a connection to `to`, bound first to `bind-source-addr`
/// when it is set. As Redis's anetTcpNonBlockBestEffortBindConnect, a
/// source that cannot be bound (not an address, not this host's) is
/// passed over rather than failing the connection.
pub fn outgoing(source: Option<&str>, to: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(to), Type::STREAM, None)?;
    if let Some(source) = source {
        match source.parse::<IpAddr>() {
            Ok(ip) if ip.is_ipv4() == to.is_ipv4() => {
                if let Err(e) = socket.bind(&SocketAddr::new(ip, 0).into()) {
                    tracing::warn!("Could not bind to bind-source-addr {source}: {e}");
                }
            }
            _ => tracing::warn!("bind-source-addr {source} is no address of {to}'s family"),
        }
    }
    Ok(socket)
}

/// [`outgoing`], connecting within `timeout`.
pub fn connect_timeout(source: Option<&str>, to: SocketAddr, timeout: std::time::Duration) -> io::Result<std::net::TcpStream> {
    let socket = outgoing(source, to)?;
    socket.connect_timeout(&to.into(), timeout)?;
    Ok(socket.into())
}

/// [`outgoing`], connecting without waiting (the event loop learns when
/// the connection is made).
pub fn connect_nonblocking(source: Option<&str>, to: SocketAddr) -> io::Result<mio::net::TcpStream> {
    let socket = outgoing(source, to)?;
    socket.set_nonblocking(true)?;
    match socket.connect(&to.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(mio::net::TcpStream::from_std(socket.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bind: &[&str], port: u16) -> Config {
        let mut config = Config::default();
        config.bind = bind.iter().map(|s| s.to_string()).collect();
        config.port = port;
        config
    }

    /// `socket-mark-id` marks every listener, where the system lets this
    /// process mark sockets at all (CAP_NET_ADMIN).
    #[test]
    fn listeners_carry_the_socket_mark() {
        let probe = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        if probe.set_mark(42).is_err() {
            eprintln!("no CAP_NET_ADMIN: the marks cannot be set here");
            return;
        }
        let mut config = config(&["127.0.0.1"], 0);
        config.socket_mark_id = 42;
        for listener in bind_everywhere(&config, 0, 2).expect("bind").into_iter().flatten() {
            assert_eq!(socket2::SockRef::from(&listener).mark().expect("SO_MARK"), 42);
        }
        for listener in bind_plain(&config, 0).expect("bind") {
            assert_eq!(socket2::SockRef::from(&listener).mark().expect("SO_MARK"), 42);
        }
    }

    #[test]
    fn a_taken_port_is_refused_and_no_listener_is_left() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("test setup");
        let port = taken.local_addr().expect("test setup").port();
        let e = bind_everywhere(&config(&["127.0.0.1"], port), port, 2).expect_err("refused");
        assert_eq!(e.to_string(), format!("Failed listening on port {port} (TCP), aborting."));
    }

    #[test]
    fn an_address_that_does_not_parse_fails_even_when_optional() {
        assert!(bind_everywhere(&config(&["127.0.0.1", "-999.1.1.1"], 0), 0, 2).is_err());
    }

    #[test]
    fn no_bind_address_or_port_0_means_no_listener() {
        for config in [config(&[], 6379), config(&["127.0.0.1"], 0)] {
            let bound = bind_on(&config, config.port, 3).expect("test setup");
            assert_eq!(bound.iter().map(Vec::len).collect::<Vec<_>>(), [0, 0, 0]);
        }
    }

    #[test]
    fn an_outgoing_socket_binds_its_source_when_it_can() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("test setup");
        let to = server.local_addr().expect("test setup");
        let s = connect_timeout(Some("127.0.0.1"), to, std::time::Duration::from_secs(5)).expect("test setup");
        assert_eq!(s.local_addr().expect("test setup").ip(), "127.0.0.1".parse::<IpAddr>().expect("test setup"));
        let s = connect_timeout(Some("127.0.0.2"), to, std::time::Duration::from_secs(5)).expect("test setup");
        assert_eq!(s.local_addr().expect("test setup").ip(), "127.0.0.2".parse::<IpAddr>().expect("test setup"));
        // Not an address of this host: connected all the same.
        assert!(connect_timeout(Some("192.0.2.1"), to, std::time::Duration::from_secs(5)).is_ok());
        assert!(connect_timeout(Some("nonsense"), to, std::time::Duration::from_secs(5)).is_ok());
    }
}
