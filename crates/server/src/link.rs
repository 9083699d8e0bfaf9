//! A blocking connection's socket, for threads of their own: replication's
//! links on either side (a master's threads per replica, a replica's link
//! thread) and MIGRATE's connections to its targets. Whichever kind it
//! is: TCP, a Unix socket, or TLS over TCP (`keel_tls::BlockingTls`, whose
//! session the threads of one link share). Shared by reference: one
//! thread reads while others write.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use keel_tls::BlockingTls;

pub enum Link {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Arc<BlockingTls>),
}

impl Link {
    /// Another handle on the same connection (and TLS session).
    pub fn try_clone(&self) -> io::Result<Link> {
        Ok(match self {
            Link::Tcp(s) => Link::Tcp(s.try_clone()?),
            Link::Unix(s) => Link::Unix(s.try_clone()?),
            Link::Tls(s) => Link::Tls(Arc::clone(s)),
        })
    }

    /// The TCP socket under it, if any.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Link::Tcp(s) => Some(s),
            Link::Unix(_) => None,
            Link::Tls(s) => Some(s.socket()),
        }
    }

    /// Ends both directions: the link's threads see their next call fail.
    pub fn shutdown(&self) {
        let _ = match self {
            Link::Tcp(s) => s.shutdown(Shutdown::Both),
            Link::Unix(s) => s.shutdown(Shutdown::Both),
            Link::Tls(s) => s.socket().shutdown(Shutdown::Both),
        };
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.set_read_timeout(Some(timeout)),
            Link::Unix(s) => s.set_read_timeout(Some(timeout)),
            Link::Tls(s) => s.socket().set_read_timeout(Some(timeout)),
        }
    }

    pub fn set_write_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.set_write_timeout(Some(timeout)),
            Link::Unix(s) => s.set_write_timeout(Some(timeout)),
            Link::Tls(s) => s.socket().set_write_timeout(Some(timeout)),
        }
    }
}

impl AsRawFd for Link {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Link::Tcp(s) => s.as_raw_fd(),
            Link::Unix(s) => s.as_raw_fd(),
            Link::Tls(s) => s.socket().as_raw_fd(),
        }
    }
}

impl Read for &Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => (&*s).read(buf),
            Link::Unix(s) => (&*s).read(buf),
            Link::Tls(s) => (&**s).read(buf),
        }
    }
}

impl Write for &Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => (&*s).write(buf),
            Link::Unix(s) => (&*s).write(buf),
            Link::Tls(s) => (&**s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
