//! `keel-cluster`: Redis Cluster 7.0's two formats, as pure functions.
//!
//! * [`Message`] is the cluster bus message (`clusterMsg`, protocol
//!   version 1): [`Message::encode`] writes the bytes Redis 7.0 writes and
//!   [`Message::decode`] makes every check Redis makes of a received
//!   packet, with typed [`BusError`]s; [`frame_len`] cuts a byte stream
//!   into frames as Redis's bus reader does. The layout is documented in
//!   `bus.rs`.
//! * [`NodeLine`] and [`NodesFile`] are a `CLUSTER NODES` line and the
//!   `nodes.conf` file made of them (plus its `vars` line), parsed and
//!   written byte for byte as Redis does.
//!
//! Keel nodes talk to Redis nodes on the bus, so these formats must match
//! Redis's to the byte. They live in a crate of their own, apart from the
//! server's cluster state and sockets, because they are pure: fuzzed
//! (`fuzz/fuzz_targets/cluster_message.rs`, `cluster_nodes_file.rs`),
//! tested against a real Redis (`tests/redis_bus.rs`), and usable by tools
//! that read a bus capture or a nodes.conf without a server.

mod bus;
mod nodes_file;

use std::fmt;

pub use bus::{frame_len, Body, BusError, Extension, Gossip, Header, Message, MessageType, HEADER_LEN};
pub use nodes_file::{flags_from_text, flags_to_text, NodeLine, NodesFile, NodesFileError};

/// Hash slots of a cluster.
pub const SLOTS: usize = 16384;
/// Length of a node name: the hex of 160 random bits.
pub const NAME_LEN: usize = 40;

/// Node flags, as carried in a message's header and gossip entries and
/// shown by `CLUSTER NODES` (Redis's `CLUSTER_NODE_*`).
pub mod flags {
    pub const MASTER: u16 = 1;
    /// Redis's `CLUSTER_NODE_SLAVE`, shown as `slave`.
    pub const REPLICA: u16 = 2;
    /// Shown as `fail?`: this node thinks the node is failing.
    pub const PFAIL: u16 = 4;
    pub const FAIL: u16 = 8;
    pub const MYSELF: u16 = 16;
    pub const HANDSHAKE: u16 = 32;
    pub const NOADDR: u16 = 64;
    /// Never shown: the node is to be sent a MEET.
    pub const MEET: u16 = 128;
    /// Never shown: a master eligible for replica migration.
    pub const MIGRATE_TO: u16 = 256;
    pub const NOFAILOVER: u16 = 512;
}

/// Message flags, the bits of a header's `mflags[0]` (Redis's
/// `CLUSTERMSG_FLAG0_*`).
pub mod mflags {
    /// The sending master is paused for a manual failover.
    pub const PAUSED: u8 = 1;
    /// Give a FAILOVER_AUTH_ACK even if the master is up.
    pub const FORCEACK: u8 = 2;
    /// Ping extensions follow the gossip section.
    pub const EXT_DATA: u8 = 4;
}

/// A node's name: 40 characters, normally lowercase hex.
///
/// The bus carries names as 40 raw bytes and Redis checks them only where
/// it learns of a node from gossip or a file, so a decoded name is not
/// checked; [`NodeName::parse`] is the check Redis makes there.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeName(pub [u8; NAME_LEN]);

impl NodeName {
    /// A fresh random name, as Redis gives a new node.
    pub fn random() -> NodeName {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut name = [0u8; NAME_LEN];
        for byte in &mut name {
            *byte = HEX[rand::random::<usize>() % 16];
        }
        NodeName(name)
    }

    /// `text` as a name if it is 40 characters of `[0-9a-f]` (Redis's
    /// `verifyClusterNodeId`: uppercase is refused).
    pub fn parse(text: &[u8]) -> Option<NodeName> {
        let name: [u8; NAME_LEN] = text.try_into().ok()?;
        name.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')).then_some(NodeName(name))
    }

    pub fn as_bytes(&self) -> &[u8; NAME_LEN] {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The slots a node claims: bit `slot % 8` of byte `slot / 8`, as Redis's
/// `myslots` bitmap.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotBitmap(Box<[u8; SLOTS / 8]>);

impl SlotBitmap {
    pub fn empty() -> SlotBitmap {
        SlotBitmap(Box::new([0; SLOTS / 8]))
    }

    pub fn from_bytes(bytes: &[u8; SLOTS / 8]) -> SlotBitmap {
        SlotBitmap(Box::new(*bytes))
    }

    pub fn as_bytes(&self) -> &[u8; SLOTS / 8] {
        &self.0
    }

    /// Whether `slot` is set. Panics for a slot of 16384 or more.
    pub fn get(&self, slot: u16) -> bool {
        let slot = usize::from(slot);
        self.0[slot / 8] & (1 << (slot % 8)) != 0
    }

    pub fn set(&mut self, slot: u16) {
        let slot = usize::from(slot);
        self.0[slot / 8] |= 1 << (slot % 8);
    }

    pub fn clear(&mut self, slot: u16) {
        let slot = usize::from(slot);
        self.0[slot / 8] &= !(1 << (slot % 8));
    }

    pub fn count(&self) -> usize {
        self.0.iter().map(|b| b.count_ones() as usize).sum()
    }

    /// The set slots, ascending; empty bytes are skipped whole.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().enumerate().filter(|(_, byte)| **byte != 0).flat_map(|(i, &byte)| {
            (0..8u16).filter(move |bit| byte & (1 << bit) != 0).map(move |bit| i as u16 * 8 + bit)
        })
    }

    /// The set slots as inclusive ranges, ascending and maximal (the
    /// grouping `CLUSTER NODES` shows).
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for slot in self.iter() {
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == slot => *end = slot,
                _ => ranges.push((slot, slot)),
            }
        }
        ranges
    }
}

impl fmt::Debug for SlotBitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SlotBitmap").field(&self.ranges()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_only_lowercase_hex_of_forty() {
        let name = NodeName::random();
        assert_eq!(NodeName::parse(&name.0), Some(name));
        assert_eq!(name.to_string().len(), NAME_LEN);
        assert!(NodeName::parse(&[b'A'; NAME_LEN]).is_none());
        assert!(NodeName::parse(&[b'a'; NAME_LEN - 1]).is_none());
        assert!(NodeName::parse(&[b'a'; NAME_LEN + 1]).is_none());
        assert_ne!(NodeName::random(), NodeName::random());
    }

    #[test]
    fn bitmap_uses_redis_bit_order_and_groups_ranges() {
        let mut slots = SlotBitmap::empty();
        for slot in [0, 1, 2, 9, 16383] {
            slots.set(slot);
        }
        assert_eq!(slots.as_bytes()[0], 0b0000_0111);
        assert_eq!(slots.as_bytes()[1], 0b0000_0010);
        assert_eq!(slots.as_bytes()[2047], 0b1000_0000);
        assert_eq!(slots.count(), 5);
        assert_eq!(slots.ranges(), vec![(0, 2), (9, 9), (16383, 16383)]);
        slots.clear(1);
        assert!(!slots.get(1) && slots.get(2));
        assert_eq!(slots.iter().collect::<Vec<_>>(), vec![0, 2, 9, 16383]);
    }
}
