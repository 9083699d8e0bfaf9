//! A TLS session over a blocking socket that threads share: one reads
//! while others write, as a master's replica link takes acknowledgements
//! in while its stream and keepalives go out.
//!
//! A session cannot be split as a socket can, so each side takes the
//! session's lock only to seal or open records, never across a blocking
//! call: the reader waits for the network without it, and a writer
//! blocked on a full socket holds only `sending`. That lock keeps the
//! records on the wire in the order the session sealed them, whichever
//! thread sends (the reader too has to, rarely: an alert, the answer to a
//! TLS 1.3 key update). It is taken before the session's lock.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use parking_lot::Mutex;
use rustls::Connection;

use crate::TlsStream;

/// Most ciphertext read from the socket at once: a full record.
const READ_CHUNK: usize = 16 * 1024 + 512;

pub struct BlockingTls {
    sock: TcpStream,
    session: Mutex<Connection>,
    sending: Mutex<()>,
    /// Ciphertext read but not yet given to the session (the reader's
    /// alone; a lock only to share `self`).
    unfed: Mutex<Vec<u8>>,
}

impl BlockingTls {
    fn new(sock: TcpStream, mut session: Connection) -> BlockingTls {
        // Writers hand over whole pieces and send their records at once.
        session.set_buffer_limit(None);
        BlockingTls { sock, session: Mutex::new(session), sending: Mutex::new(()), unfed: Mutex::default() }
    }

    /// A session an event loop ran, to go on over its socket in blocking
    /// mode. What it held to send goes first; plaintext it had opened and
    /// not handed out is the first read's.
    pub fn from_polled(stream: TlsStream) -> io::Result<BlockingTls> {
        let TlsStream { sock, session, .. } = stream;
        let sock = TcpStream::from(sock);
        sock.set_nonblocking(false)?;
        let tls = BlockingTls::new(sock, session);
        tls.send_held()?;
        Ok(tls)
    }

    /// Runs the handshake of `session` (a client's, which speaks first)
    /// over `sock`. Reads that time out (the socket's read timeout) are
    /// tried again until `deadline`.
    pub fn handshake(sock: TcpStream, mut session: Connection, deadline: Instant) -> io::Result<BlockingTls> {
        while session.is_handshaking() {
            match session.complete_io(&mut &sock) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) && Instant::now() < deadline => {}
                Err(e) => return Err(e),
            }
        }
        let tls = BlockingTls::new(sock, session);
        tls.send_held()?;
        Ok(tls)
    }

    /// The socket under the session: for its options and addresses, and
    /// to shut it down. Bytes read or written on it directly are lost to
    /// the session.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Sends whatever the session has sealed.
    fn send_held(&self) -> io::Result<()> {
        let _sending = self.sending.lock();
        let sealed = take_sealed(&mut self.session.lock())?;
        (&self.sock).write_all(&sealed)
    }
}

/// The records the session has sealed and not sent.
fn take_sealed(session: &mut Connection) -> io::Result<Vec<u8>> {
    let mut sealed = Vec::new();
    while session.wants_write() {
        session.write_tls(&mut sealed)?;
    }
    Ok(sealed)
}

/// Plaintext, as a socket's read gives bytes: 0 once the peer has closed.
/// The socket's read timeout passes through as an error, the session
/// unharmed.
impl Read for &BlockingTls {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut unfed = self.unfed.lock();
        loop {
            {
                let mut session = self.session.lock();
                match session.reader().read(buf) {
                    // 0: the peer's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // The plaintext is all handed out, so the session has room
                // for at least one more record.
                if !unfed.is_empty() {
                    let taken = session.read_tls(&mut &unfed[..])?;
                    if taken == 0 {
                        return Ok(0);
                    }
                    unfed.drain(..taken);
                    let processed = session.process_new_packets();
                    let answer = session.wants_write();
                    drop(session);
                    // Before an error is returned: the alert says why.
                    let sent = if answer { self.send_held() } else { Ok(()) };
                    processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    sent?;
                    continue;
                }
            }
            unfed.resize(READ_CHUNK, 0);
            let read = (&self.sock).read(&mut unfed[..]);
            unfed.truncate(*read.as_ref().unwrap_or(&0));
            if read? == 0 {
                return Ok(0);
            }
        }
    }
}

/// Plaintext in, sealed and sent before the call returns; the socket's
/// write timeout passes through as an error (after which the link is of
/// no more use).
impl Write for &BlockingTls {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _sending = self.sending.lock();
        let sealed = {
            let mut session = self.session.lock();
            session.writer().write_all(buf)?;
            take_sealed(&mut session)?
        };
        (&self.sock).write_all(&sealed)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
