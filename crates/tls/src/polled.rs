//! A TLS session over a non-blocking socket, for the event loops that
//! poll it (the server's workers and cluster bus, keel-bench's driver):
//! reads and writes
//! of plaintext that answer `WouldBlock` when the network has nothing to
//! give or take, as the socket's own do, so that the next readiness event
//! goes on where they stopped.
//!
//! A session yields one record's plaintext at a time: a short read does
//! not mean the socket is drained, so with edge-triggered polling a
//! caller reads until `WouldBlock`. Output the socket did not take stays
//! in the session ([`TlsStream::holds_output`]) until [`TlsStream::send_held`]
//! at the next writable event.

use std::io::{self, Read, Write};

use mio::net::TcpStream;
use rustls::Connection;

/// How much encrypted output a session holds before it takes no more
/// plaintext: the caller keeps the rest in its own buffer.
const SENDABLE_LIMIT: usize = 256 * 1024;

pub struct TlsStream {
    pub sock: TcpStream,
    pub(crate) session: Connection,
    /// Plaintext was written before the handshake ended: the session holds
    /// it until then.
    early_output: bool,
}

impl TlsStream {
    pub fn new(sock: TcpStream, mut session: Connection) -> TlsStream {
        session.set_buffer_limit(Some(SENDABLE_LIMIT));
        TlsStream { sock, session, early_output: false }
    }

    /// Sends what the session holds: handshake messages, alerts and
    /// encrypted output.
    pub fn send_held(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            if self.session.write_tls(&mut self.sock)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// [`TlsStream::send_held`] as far as the socket takes it now; the
    /// rest waits for the next writable event.
    pub fn send_held_now(&mut self) -> io::Result<()> {
        match self.send_held() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            done => done,
        }
    }

    /// Whether output waits: encrypted for the socket, or plaintext for
    /// the handshake to end (a reply written before it).
    pub fn holds_output(&self) -> bool {
        self.session.wants_write() || (self.early_output && self.session.is_handshaking())
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.session.reader().read(buf) {
                // 0: the peer's close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.session.read_tls(&mut self.sock)? == 0 {
                return Ok(0);
            }
            if let Err(e) = self.session.process_new_packets() {
                if self.session.is_handshaking() && e == rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) {
                    // Not TLS at all, such as a plaintext client: its
                    // connection is reset, as Redis's is (OpenSSL leaves
                    // the rest unread, so the close resets), and the
                    // client says so rather than read an alert as a reply.
                    let _ = socket2::SockRef::from(&self.sock).set_linger(Some(std::time::Duration::ZERO));
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                // The alert that says why goes out before the close.
                let _ = self.send_held();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Handshake replies leave at once.
            self.send_held_now()?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Older output first, so that the session's buffer stays bounded.
        self.send_held()?;
        let taken = self.session.writer().write(buf)?;
        self.early_output |= taken > 0 && self.session.is_handshaking();
        match self.send_held() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ if taken == 0 && !buf.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            _ => Ok(taken),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_held()
    }
}
