//! The cluster bus message, Redis 7.0's `clusterMsg` (protocol version 1).
//!
//! Every integer is big-endian except a MODULE message's module id, which
//! Redis copies in its own byte order (little-endian on every platform it
//! runs on). A message is a fixed header, then a body by type:
//!
//! ```text
//! offset  size
//!      0     4  sig "RCmb"
//!      4     4  totlen: the whole message, header included
//!      8     2  ver: 1
//!     10     2  port: the sender's client port
//!     12     2  type (MessageType)
//!     14     2  count: gossip entries (PING, PONG, MEET)
//!     16     8  currentEpoch
//!     24     8  configEpoch (a replica sends its master's)
//!     32     8  offset: replication offset
//!     40    40  sender: node name
//!     80  2048  myslots: bitmap (a replica sends its master's)
//!   2128    40  slaveof: the master's name, all zero for none
//!   2168    46  myip: NUL-padded text; empty = "use the socket's address"
//!   2214     2  extensions: how many ping extensions follow the gossip
//!   2216    30  unused, zero
//!   2246     2  pport: plaintext client port when port is TLS
//!   2248     2  cport: the sender's bus port
//!   2250     2  flags (crate::flags)
//!   2252     1  state: 0 ok, 1 fail
//!   2253     3  mflags (crate::mflags in mflags[0])
//!   2256        body:
//!   PING, PONG, MEET  count x gossip (104 bytes each):
//!                       name 40, ping_sent u32 (s), pong_received u32 (s),
//!                       ip 46, port 2, cport 2, flags 2, pport 2, unused 2
//!                     then, with mflags EXT_DATA, `extensions` x extension:
//!                       length u32 (the whole extension, a multiple of 8),
//!                       type u16, unused u16, data; type 0 = hostname:
//!                       the name, NUL, zero padding to a multiple of 8
//!   FAIL              name 40
//!   PUBLISH(SHARD)    channel_len u32, message_len u32, channel, message
//!   UPDATE            configEpoch u64, name 40, slots 2048
//!   MODULE            module_id u64 (sender's order), len u32, type u8, payload
//!   FAILOVER_AUTH_REQUEST, FAILOVER_AUTH_ACK, MFSTART: nothing
//! ```

use thiserror::Error;

use crate::{mflags, NodeName, SlotBitmap, NAME_LEN, SLOTS};

/// The fixed header's length: the shortest message, and the least
/// `totlen` a stream may announce.
pub const HEADER_LEN: usize = 2256;
const SIGNATURE: &[u8; 4] = b"RCmb";
const VERSION: u16 = 1;
/// `NET_IP_STR_LEN`: room for an IPv6 address and its NUL.
const IP_LEN: usize = 46;
const GOSSIP_LEN: usize = 104;
const EXT_HEADER_LEN: usize = 8;
const EXT_HOSTNAME: u16 = 0;
const PUBLISH_FIXED: usize = 8;
const UPDATE_LEN: usize = 8 + NAME_LEN + SLOTS / 8;
const MODULE_FIXED: usize = 13;

const _: () = assert!(HEADER_LEN == 80 + SLOTS / 8 + NAME_LEN + IP_LEN + 2 + 30 + 2 + 2 + 2 + 1 + 3);
const _: () = assert!(GOSSIP_LEN == NAME_LEN + 4 + 4 + IP_LEN + 5 * 2);

/// Why bytes are not a message Redis would process.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BusError {
    #[error("frame of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short { len: usize },
    #[error("bad cluster bus signature (not \"RCmb\")")]
    BadSignature,
    #[error("totlen {totlen} is below the {HEADER_LEN}-byte minimum")]
    TooShort { totlen: u32 },
    #[error("totlen {totlen} but the frame has {frame} bytes")]
    FrameMismatch { totlen: u32, frame: usize },
    #[error("cluster bus protocol version {0}, only 1 is known")]
    Version(u16),
    #[error("unknown message type {0}")]
    UnknownType(u16),
    #[error("{kind:?} message of length {totlen} but expected length {expected}")]
    BadLength { kind: MessageType, totlen: u32, expected: u64 },
    #[error("{count} gossip entries do not fit a {kind:?} message of length {totlen}")]
    GossipCountTooLarge { kind: MessageType, count: u16, totlen: u32 },
    #[error("ping extension of {length} bytes is not padded to 8")]
    ExtensionPadding { length: u32 },
    #[error("ping extension of {length} bytes is shorter than its header")]
    ExtensionTooShort { length: u32 },
    #[error("ping extension of {length} bytes exceeds the {left} bytes left in the message")]
    ExtensionTooLong { length: u32, left: usize },
    #[error("hostname extension without its terminating NUL")]
    HostnameUnterminated,
    #[error("{0} is not UTF-8")]
    NotText(&'static str),
}

/// The type of a message (Redis's `CLUSTERMSG_TYPE_*`, numbered in order
/// from PING = 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    Ping,
    Pong,
    Meet,
    Fail,
    Publish,
    FailoverAuthRequest,
    FailoverAuthAck,
    Update,
    MfStart,
    Module,
    PublishShard,
}

impl MessageType {
    const ALL: [MessageType; 11] = [
        MessageType::Ping,
        MessageType::Pong,
        MessageType::Meet,
        MessageType::Fail,
        MessageType::Publish,
        MessageType::FailoverAuthRequest,
        MessageType::FailoverAuthAck,
        MessageType::Update,
        MessageType::MfStart,
        MessageType::Module,
        MessageType::PublishShard,
    ];

    /// The number on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn from_code(code: u16) -> Option<MessageType> {
        MessageType::ALL.get(usize::from(code)).copied()
    }
}

/// What every message says about its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    pub current_epoch: u64,
    pub config_epoch: u64,
    pub offset: u64,
    pub sender: NodeName,
    pub slots: SlotBitmap,
    /// The sender's master; all zero on the wire for none.
    pub replica_of: Option<NodeName>,
    /// The address the sender announces; empty for "take it from the
    /// socket". At most 45 bytes travel (Redis's `NET_IP_STR_LEN` less
    /// its NUL); encoding cuts a longer one there.
    pub ip: String,
    pub flags: u16,
    /// The sender's view of the cluster: state byte 0 (`CLUSTER_OK`) is
    /// true, anything else false.
    pub state_ok: bool,
    pub mflags: [u8; 3],
}

/// What a PING, PONG or MEET says about another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gossip {
    pub name: NodeName,
    /// Seconds (Redis sends its millisecond times divided by 1000).
    pub ping_sent: u32,
    pub pong_received: u32,
    /// As [`Header::ip`]: at most 45 bytes travel.
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    pub pport: u16,
}

/// A ping extension. Redis 7.0 sends only the hostname
/// (`cluster-announce-hostname`, which holds no NUL: the wire ends it
/// with one); extensions of other types are skipped on decoding, as Redis
/// skips them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extension {
    Hostname(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Ping { gossip: Vec<Gossip>, extensions: Vec<Extension> },
    Pong { gossip: Vec<Gossip>, extensions: Vec<Extension> },
    Meet { gossip: Vec<Gossip>, extensions: Vec<Extension> },
    Fail { name: NodeName },
    Publish { channel: Vec<u8>, message: Vec<u8> },
    PublishShard { channel: Vec<u8>, message: Vec<u8> },
    FailoverAuthRequest,
    FailoverAuthAck,
    MfStart,
    Update { config_epoch: u64, name: NodeName, slots: SlotBitmap },
    Module { module_id: u64, kind: u8, payload: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub body: Body,
}

/// How long the frame at the start of `buf` is, from its first 8 bytes:
/// `Ok(None)` until they are there. A bad signature or a length below the
/// header's is an error, after which Redis drops the link: the stream
/// can not be resynchronised.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, BusError> {
    let Some(start) = buf.get(..8) else { return Ok(None) };
    if &start[..4] != SIGNATURE {
        return Err(BusError::BadSignature);
    }
    let totlen = u32::from_be_bytes([start[4], start[5], start[6], start[7]]);
    if (totlen as usize) < HEADER_LEN {
        return Err(BusError::TooShort { totlen });
    }
    Ok(Some(totlen as usize))
}

impl Message {
    pub fn kind(&self) -> MessageType {
        match self.body {
            Body::Ping { .. } => MessageType::Ping,
            Body::Pong { .. } => MessageType::Pong,
            Body::Meet { .. } => MessageType::Meet,
            Body::Fail { .. } => MessageType::Fail,
            Body::Publish { .. } => MessageType::Publish,
            Body::PublishShard { .. } => MessageType::PublishShard,
            Body::FailoverAuthRequest => MessageType::FailoverAuthRequest,
            Body::FailoverAuthAck => MessageType::FailoverAuthAck,
            Body::MfStart => MessageType::MfStart,
            Body::Update { .. } => MessageType::Update,
            Body::Module { .. } => MessageType::Module,
        }
    }

    /// The message's bytes, as Redis writes them: `count` is the number of
    /// gossip entries, `extensions` the number of extensions, and
    /// `mflags[0]` gets EXT_DATA when there are any.
    ///
    /// Panics on more than 65535 gossip entries or extensions, or a
    /// channel, message or payload of 4 GiB: no sender builds them.
    pub fn encode(&self) -> Vec<u8> {
        let h = &self.header;
        let mut out = Vec::with_capacity(HEADER_LEN + GOSSIP_LEN * 3);
        out.extend_from_slice(SIGNATURE);
        out.extend_from_slice(&[0; 4]); // totlen, set at the end
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&h.port.to_be_bytes());
        out.extend_from_slice(&self.kind().code().to_be_bytes());
        let (gossip, extensions) = match &self.body {
            Body::Ping { gossip, extensions } | Body::Pong { gossip, extensions } | Body::Meet { gossip, extensions } => (&gossip[..], &extensions[..]),
            _ => (&[][..], &[][..]),
        };
        out.extend_from_slice(&u16::try_from(gossip.len()).expect("at most 65535 gossip entries").to_be_bytes());
        out.extend_from_slice(&h.current_epoch.to_be_bytes());
        out.extend_from_slice(&h.config_epoch.to_be_bytes());
        out.extend_from_slice(&h.offset.to_be_bytes());
        out.extend_from_slice(&h.sender.0);
        out.extend_from_slice(h.slots.as_bytes());
        out.extend_from_slice(&h.replica_of.map_or([0; NAME_LEN], |name| name.0));
        put_ip(&mut out, &h.ip);
        out.extend_from_slice(&u16::try_from(extensions.len()).expect("at most 65535 extensions").to_be_bytes());
        out.extend_from_slice(&[0; 30]);
        out.extend_from_slice(&h.pport.to_be_bytes());
        out.extend_from_slice(&h.cport.to_be_bytes());
        out.extend_from_slice(&h.flags.to_be_bytes());
        out.push(if h.state_ok { 0 } else { 1 });
        let mut message_flags = h.mflags;
        if !extensions.is_empty() {
            message_flags[0] |= mflags::EXT_DATA;
        }
        out.extend_from_slice(&message_flags);
        debug_assert_eq!(out.len(), HEADER_LEN);

        match &self.body {
            Body::Ping { .. } | Body::Pong { .. } | Body::Meet { .. } => {
                for g in gossip {
                    out.extend_from_slice(&g.name.0);
                    out.extend_from_slice(&g.ping_sent.to_be_bytes());
                    out.extend_from_slice(&g.pong_received.to_be_bytes());
                    put_ip(&mut out, &g.ip);
                    for field in [g.port, g.cport, g.flags, g.pport, 0] {
                        out.extend_from_slice(&field.to_be_bytes());
                    }
                }
                for ext in extensions {
                    match ext {
                        Extension::Hostname(name) => {
                            let data_len = (name.len() + 1).div_ceil(8) * 8;
                            let length = u32::try_from(EXT_HEADER_LEN + data_len).expect("a hostname under 4 GiB");
                            out.extend_from_slice(&length.to_be_bytes());
                            out.extend_from_slice(&EXT_HOSTNAME.to_be_bytes());
                            out.extend_from_slice(&[0; 2]);
                            out.extend_from_slice(name.as_bytes());
                            out.resize(out.len() + data_len - name.len(), 0);
                        }
                    }
                }
            }
            Body::Fail { name } => out.extend_from_slice(&name.0),
            Body::Publish { channel, message } | Body::PublishShard { channel, message } => {
                out.extend_from_slice(&len_u32(channel.len()).to_be_bytes());
                out.extend_from_slice(&len_u32(message.len()).to_be_bytes());
                out.extend_from_slice(channel);
                out.extend_from_slice(message);
            }
            Body::FailoverAuthRequest | Body::FailoverAuthAck | Body::MfStart => {}
            Body::Update { config_epoch, name, slots } => {
                out.extend_from_slice(&config_epoch.to_be_bytes());
                out.extend_from_slice(&name.0);
                out.extend_from_slice(slots.as_bytes());
            }
            Body::Module { module_id, kind, payload } => {
                out.extend_from_slice(&module_id.to_le_bytes());
                out.extend_from_slice(&len_u32(payload.len()).to_be_bytes());
                out.push(*kind);
                out.extend_from_slice(payload);
            }
        }
        let totlen = len_u32(out.len());
        out[4..8].copy_from_slice(&totlen.to_be_bytes());
        out
    }

    /// One whole frame (as [`frame_len`] cut it) as a message, with every
    /// check Redis's `clusterProcessPacket` makes before it acts on one:
    /// signature, version, a known type, and `totlen` equal to the length
    /// the type's fields imply (gossip entries, extensions walked one by
    /// one with their padding, publish and module lengths). Beyond Redis,
    /// nothing is read outside the frame: an extension shorter than its
    /// own header, or a hostname without its NUL, is an error here where
    /// Redis would read past it.
    pub fn decode(frame: &[u8]) -> Result<Message, BusError> {
        if frame.len() < HEADER_LEN {
            if frame.len() >= 4 && &frame[..4] != SIGNATURE {
                return Err(BusError::BadSignature);
            }
            return Err(BusError::Short { len: frame.len() });
        }
        let r = Reader(frame);
        if r.bytes(0, 4) != SIGNATURE {
            return Err(BusError::BadSignature);
        }
        let totlen = r.u32(4);
        if totlen as usize != frame.len() {
            return Err(BusError::FrameMismatch { totlen, frame: frame.len() });
        }
        let version = r.u16(8);
        if version != VERSION {
            return Err(BusError::Version(version));
        }
        let code = r.u16(12);
        let kind = MessageType::from_code(code).ok_or(BusError::UnknownType(code))?;
        let count = r.u16(14);
        let extension_count = r.u16(2214);
        let mflags_bytes: [u8; 3] = r.array(2253);
        let header = Header {
            port: r.u16(10),
            current_epoch: r.u64(16),
            config_epoch: r.u64(24),
            offset: r.u64(32),
            sender: NodeName(r.array(40)),
            slots: SlotBitmap::from_bytes(&r.array(80)),
            replica_of: Some(NodeName(r.array(2128))).filter(|name| name.0 != [0; NAME_LEN]),
            ip: ip_text(r.bytes(2168, IP_LEN), "myip")?,
            pport: r.u16(2246),
            cport: r.u16(2248),
            flags: r.u16(2250),
            state_ok: r.0[2252] == 0,
            mflags: mflags_bytes,
        };

        let body_len = frame.len() - HEADER_LEN;
        let expect = |expected: usize| {
            if body_len == expected {
                Ok(())
            } else {
                Err(BusError::BadLength { kind, totlen, expected: (HEADER_LEN + expected) as u64 })
            }
        };
        let body = match kind {
            MessageType::Ping | MessageType::Pong | MessageType::Meet => {
                let gossip_len = GOSSIP_LEN * usize::from(count);
                if gossip_len > body_len {
                    return Err(BusError::GossipCountTooLarge { kind, count, totlen });
                }
                let gossip = (0..usize::from(count)).map(|i| gossip_at(&r, HEADER_LEN + i * GOSSIP_LEN)).collect::<Result<Vec<_>, _>>()?;
                let mut at = HEADER_LEN + gossip_len;
                let mut extensions = Vec::new();
                // Without EXT_DATA Redis ignores the extension count.
                if mflags_bytes[0] & mflags::EXT_DATA != 0 {
                    for _ in 0..extension_count {
                        let left = frame.len() - at;
                        // Redis reads an absent extension's header past
                        // the packet; here it is one too long for it.
                        if left < EXT_HEADER_LEN {
                            return Err(BusError::ExtensionTooLong { length: EXT_HEADER_LEN as u32, left });
                        }
                        let length = r.u32(at);
                        if length % 8 != 0 {
                            return Err(BusError::ExtensionPadding { length });
                        }
                        if (length as usize) < EXT_HEADER_LEN {
                            return Err(BusError::ExtensionTooShort { length });
                        }
                        if length as usize > left {
                            return Err(BusError::ExtensionTooLong { length, left });
                        }
                        if r.u16(at + 4) == EXT_HOSTNAME {
                            let data = r.bytes(at + EXT_HEADER_LEN, length as usize - EXT_HEADER_LEN);
                            let end = data.iter().position(|&b| b == 0).ok_or(BusError::HostnameUnterminated)?;
                            let name = std::str::from_utf8(&data[..end]).map_err(|_| BusError::NotText("hostname"))?;
                            extensions.push(Extension::Hostname(name.to_owned()));
                        }
                        at += length as usize;
                    }
                }
                expect(at - HEADER_LEN)?;
                match kind {
                    MessageType::Ping => Body::Ping { gossip, extensions },
                    MessageType::Pong => Body::Pong { gossip, extensions },
                    _ => Body::Meet { gossip, extensions },
                }
            }
            MessageType::Fail => {
                expect(NAME_LEN)?;
                Body::Fail { name: NodeName(r.array(HEADER_LEN)) }
            }
            MessageType::Publish | MessageType::PublishShard => {
                // The lengths are read before the body's size is known to
                // hold them, as Redis does (its buffer is always a whole
                // clusterMsg); a frame too short for them is a bad length.
                if body_len < PUBLISH_FIXED {
                    return Err(BusError::BadLength { kind, totlen, expected: (HEADER_LEN + PUBLISH_FIXED) as u64 });
                }
                let channel_len = r.u32(HEADER_LEN) as usize;
                let message_len = r.u32(HEADER_LEN + 4) as usize;
                let expected = PUBLISH_FIXED as u64 + channel_len as u64 + message_len as u64;
                if body_len as u64 != expected {
                    return Err(BusError::BadLength { kind, totlen, expected: HEADER_LEN as u64 + expected });
                }
                let channel = r.bytes(HEADER_LEN + PUBLISH_FIXED, channel_len).to_vec();
                let message = r.bytes(HEADER_LEN + PUBLISH_FIXED + channel_len, message_len).to_vec();
                if kind == MessageType::Publish {
                    Body::Publish { channel, message }
                } else {
                    Body::PublishShard { channel, message }
                }
            }
            MessageType::FailoverAuthRequest | MessageType::FailoverAuthAck | MessageType::MfStart => {
                expect(0)?;
                match kind {
                    MessageType::FailoverAuthRequest => Body::FailoverAuthRequest,
                    MessageType::FailoverAuthAck => Body::FailoverAuthAck,
                    _ => Body::MfStart,
                }
            }
            MessageType::Update => {
                expect(UPDATE_LEN)?;
                Body::Update {
                    config_epoch: r.u64(HEADER_LEN),
                    name: NodeName(r.array(HEADER_LEN + 8)),
                    slots: SlotBitmap::from_bytes(&r.array(HEADER_LEN + 8 + NAME_LEN)),
                }
            }
            MessageType::Module => {
                if body_len < MODULE_FIXED {
                    return Err(BusError::BadLength { kind, totlen, expected: (HEADER_LEN + MODULE_FIXED) as u64 });
                }
                let len = r.u32(HEADER_LEN + 8) as usize;
                if body_len as u64 != MODULE_FIXED as u64 + len as u64 {
                    return Err(BusError::BadLength { kind, totlen, expected: (HEADER_LEN + MODULE_FIXED) as u64 + len as u64 });
                }
                Body::Module {
                    module_id: u64::from_le_bytes(r.array(HEADER_LEN)),
                    kind: r.0[HEADER_LEN + 12],
                    payload: r.bytes(HEADER_LEN + MODULE_FIXED, len).to_vec(),
                }
            }
        };
        Ok(Message { header, body })
    }
}

/// A length that must fit the format's u32 fields.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a bus message under 4 GiB")
}

/// Writes an address into its 46-byte field, cut to 45 bytes so that a
/// NUL always ends it (as Redis's `strncpy` of `NET_IP_STR_LEN - 1`).
fn put_ip(out: &mut Vec<u8>, ip: &str) {
    let bytes = &ip.as_bytes()[..ip.len().min(IP_LEN - 1)];
    out.extend_from_slice(bytes);
    out.resize(out.len() + IP_LEN - bytes.len(), 0);
}

/// An address field's text: up to its first NUL, within the first 45
/// bytes (Redis terminates the copy it takes at the 46th).
fn ip_text(field: &[u8], what: &'static str) -> Result<String, BusError> {
    let field = &field[..IP_LEN - 1];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).map(str::to_owned).map_err(|_| BusError::NotText(what))
}

fn gossip_at(r: &Reader<'_>, at: usize) -> Result<Gossip, BusError> {
    Ok(Gossip {
        name: NodeName(r.array(at)),
        ping_sent: r.u32(at + 40),
        pong_received: r.u32(at + 44),
        ip: ip_text(r.bytes(at + 48, IP_LEN), "gossip ip")?,
        port: r.u16(at + 94),
        cport: r.u16(at + 96),
        flags: r.u16(at + 98),
        pport: r.u16(at + 100),
    })
}

/// Fixed-offset reads of a frame whose length the caller has checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.0[at..at + len]
    }

    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0; N];
        out.copy_from_slice(self.bytes(at, N));
        out
    }

    fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes(self.array(at))
    }

    fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.array(at))
    }

    fn u64(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.array(at))
    }
}

#[cfg(test)]
mod tests;
