//! The `keel-cluster-bus` thread: accepts the other nodes' links on the
//! bus port, reads their messages into the state, and runs the cluster's
//! cron every 100 ms (Redis runs clusterCron from its serverCron at the
//! same pace). Commands that change the state (CLUSTER MEET, SETSLOT...)
//! take the same lock from the workers and wake this thread to act.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

use crate::server::Server;

const LISTENER_BASE: usize = usize::MAX / 2;
pub const WAKER: Token = Token(1);
/// Redis's clusterCron period.
const CRON: Duration = Duration::from_millis(100);

pub struct Bus {
    poll: Poll,
    listeners: Vec<TcpListener>,
}

impl Bus {
    pub fn new(poll: Poll, listeners: Vec<std::net::TcpListener>) -> Bus {
        let listeners = listeners
            .into_iter()
            .map(|l| {
                let _ = l.set_nonblocking(true);
                TcpListener::from_std(l)
            })
            .collect();
        Bus { poll, listeners }
    }

    pub fn spawn(self, server: Arc<Server>) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("keel-cluster-bus".into()).spawn(move || self.run(&server))
    }

    fn run(mut self, server: &Server) {
        let Some(cluster) = server.cluster.as_ref() else { return };
        for (i, listener) in self.listeners.iter_mut().enumerate() {
            if let Err(e) = self.poll.registry().register(listener, Token(LISTENER_BASE + i), Interest::READABLE) {
                tracing::warn!("Cluster bus listener not registered: {e}");
            }
        }
        let mut events = Events::with_capacity(256);
        let mut next_cron = Instant::now();
        while !server.shutdown.load(std::sync::atomic::Ordering::Relaxed) {
            let timeout = next_cron.saturating_duration_since(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::warn!("Cluster bus poll failed: {e}");
                    return;
                }
            }
            let mut accepted = Vec::new();
            for event in events.iter() {
                let token = event.token().0;
                if token >= LISTENER_BASE {
                    if let Some(listener) = self.listeners.get(token - LISTENER_BASE) {
                        while let Ok((stream, _)) = listener.accept() {
                            accepted.push(stream);
                        }
                    }
                }
            }
            let publishes = std::mem::take(&mut *cluster.publishes.lock());
            let cron_due = Instant::now() >= next_cron;
            if cron_due {
                next_cron = Instant::now() + CRON;
            }
            cluster.with(server, |st| {
                for stream in accepted {
                    if let Err(e) = st.accept(stream) {
                        tracing::warn!("Error creating an accepting connection for cluster node: {e}");
                    }
                }
                for event in events.iter() {
                    let id = event.token().0;
                    if !(super::state::FIRST_LINK..LISTENER_BASE).contains(&id) {
                        continue;
                    }
                    if event.is_writable() && st.flush(id).is_err() {
                        st.close_link(id);
                        continue;
                    }
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        st.readable(id);
                    }
                }
                for (shard, channel, message) in publishes {
                    st.broadcast_publish(shard, channel, message);
                }
                if cron_due {
                    st.cron();
                }
            });
        }
    }
}
