//! `nodes.conf` and the `CLUSTER NODES` lines it is made of.
//!
//! A line, fields separated by one space:
//!
//! ```text
//! <name> <ip>:<port>@<cport>[,<hostname>] <flags> <master name or -> \
//!     <ping sent ms> <pong received ms> <config epoch> connected|disconnected \
//!     <slot or first-last>... [<slot>->-<name>]... [<slot>-<-<name>]...
//! ```
//!
//! `flags` is a comma list in the order `myself, master, slave, fail?,
//! fail, handshake, noaddr, nofailover`, or `noflags`. The bracketed
//! migrating (`->-`) and importing (`-<-`) slots are written for the
//! `myself` line only, in slot order. An address may lack `@<cport>`
//! (files older than Redis 4), which means port + 10000.
//!
//! The file is one line per node (handshake nodes left out), each ended by
//! a newline, then `vars currentEpoch <n> lastVoteEpoch <n>`. Blank lines
//! are skipped, as are unknown `vars` names.

use std::fmt::Write as _;

use thiserror::Error;

use crate::{flags, NodeName, SLOTS};

/// The flags a line shows, in the order Redis writes them.
const FLAG_NAMES: [(u16, &str); 8] = [
    (flags::MYSELF, "myself"),
    (flags::MASTER, "master"),
    (flags::REPLICA, "slave"),
    (flags::PFAIL, "fail?"),
    (flags::FAIL, "fail"),
    (flags::HANDSHAKE, "handshake"),
    (flags::NOADDR, "noaddr"),
    (flags::NOFAILOVER, "nofailover"),
];

/// The bus port of a node whose line names none (`CLUSTER_PORT_INCR`).
const CPORT_OFFSET: u32 = 10_000;

/// Why a line or a file is not one Redis would load.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NodesFileError {
    #[error("a node line has at least 8 fields, this one has {0}")]
    TooFewFields(usize),
    #[error("bad node name {0:?}")]
    BadName(String),
    #[error("bad address {0:?}")]
    BadAddress(String),
    #[error("unknown node flag {0:?}")]
    BadFlag(String),
    #[error("bad number {0:?}")]
    BadNumber(String),
    #[error("link state {0:?} is neither connected nor disconnected")]
    BadLinkState(String),
    #[error("bad slot or slot range {0:?}")]
    BadSlot(String),
    #[error("a vars line needs a value for every name")]
    BadVars,
    #[error("node {0} has a second line")]
    DuplicateNode(NodeName),
    #[error("a second node is flagged myself")]
    TwoMyself,
    #[error("no node is flagged myself")]
    NoMyself,
    #[error("line {line}: {error}")]
    AtLine { line: usize, error: Box<NodesFileError> },
}

/// One node's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub name: NodeName,
    /// Empty for a node without an address (`noaddr`).
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    /// The announced hostname; never `Some("")` (an empty one is not
    /// written).
    pub hostname: Option<String>,
    /// Only the bits [`flags_to_text`] shows survive a write.
    pub flags: u16,
    pub master: Option<NodeName>,
    /// Unix milliseconds of the ping awaiting its pong, 0 for none.
    pub ping_sent_ms: u64,
    pub pong_received_ms: u64,
    pub config_epoch: u64,
    pub connected: bool,
    /// Inclusive ranges, written as given: `first-last`, or `slot` alone.
    pub slots: Vec<(u16, u16)>,
    pub migrating: Vec<(u16, NodeName)>,
    pub importing: Vec<(u16, NodeName)>,
}

/// `flags` as a line shows them: `myself,master`, or `noflags`.
pub fn flags_to_text(flags: u16) -> String {
    let names: Vec<&str> = FLAG_NAMES.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, name)| *name).collect();
    if names.is_empty() {
        "noflags".to_owned()
    } else {
        names.join(",")
    }
}

/// A comma list of flag names as bits (any case, as Redis reads them);
/// an unknown name is an error, where Redis's loader stops the server.
pub fn flags_from_text(text: &str) -> Result<u16, NodesFileError> {
    text.split(',').try_fold(0, |bits, name| {
        if name.eq_ignore_ascii_case("noflags") {
            return Ok(bits);
        }
        FLAG_NAMES.iter().find(|(_, known)| name.eq_ignore_ascii_case(known)).map(|(bit, _)| bits | bit).ok_or_else(|| NodesFileError::BadFlag(name.to_owned()))
    })
}

impl NodeLine {
    /// One line (no newline), with the checks Redis's loader makes, and
    /// stricter numbers: ports, epochs and times must be plain decimal
    /// where Redis's `atoi` takes any prefix, a range must not run
    /// backwards, and the link state must be `connected` or
    /// `disconnected` where Redis reads neither.
    pub fn parse(line: &str) -> Result<NodeLine, NodesFileError> {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if fields.len() < 8 {
            return Err(NodesFileError::TooFewFields(fields.len()));
        }
        let name = node_name(fields[0])?;

        let (address, hostname) = match fields[1].split_once(',') {
            Some((address, hostname)) => (address, Some(hostname).filter(|h| !h.is_empty()).map(str::to_owned)),
            None => (fields[1], None),
        };
        let bad_address = || NodesFileError::BadAddress(fields[1].to_owned());
        let (ip, ports) = address.rsplit_once(':').ok_or_else(bad_address)?;
        let (port, cport) = match ports.split_once('@') {
            Some((port, cport)) => (port.parse::<u16>().map_err(|_| bad_address())?, cport.parse::<u16>().map_err(|_| bad_address())?),
            None => {
                let port = ports.parse::<u16>().map_err(|_| bad_address())?;
                (port, u16::try_from(u32::from(port) + CPORT_OFFSET).map_err(|_| bad_address())?)
            }
        };

        let master = match fields[3] {
            "-" => None,
            text => Some(node_name(text)?),
        };
        let connected = match fields[7] {
            "connected" => true,
            "disconnected" => false,
            other => return Err(NodesFileError::BadLinkState(other.to_owned())),
        };

        let mut node = NodeLine {
            name,
            ip: ip.to_owned(),
            port,
            cport,
            hostname,
            flags: flags_from_text(fields[2])?,
            master,
            ping_sent_ms: number(fields[4])?,
            pong_received_ms: number(fields[5])?,
            config_epoch: number(fields[6])?,
            connected,
            slots: Vec::new(),
            migrating: Vec::new(),
            importing: Vec::new(),
        };
        for field in &fields[8..] {
            let bad_slot = || NodesFileError::BadSlot((*field).to_owned());
            if let Some(inner) = field.strip_prefix('[') {
                let inner = inner.strip_suffix(']').ok_or_else(bad_slot)?;
                let (slot, to, list) = if let Some((slot, to)) = inner.split_once("->-") {
                    (slot, to, &mut node.migrating)
                } else if let Some((slot, from)) = inner.split_once("-<-") {
                    (slot, from, &mut node.importing)
                } else {
                    return Err(bad_slot());
                };
                list.push((slot_number(slot).ok_or_else(bad_slot)?, node_name(to)?));
            } else {
                let (first, last) = field.split_once('-').unwrap_or((field, field));
                let (first, last) = (slot_number(first).ok_or_else(bad_slot)?, slot_number(last).ok_or_else(bad_slot)?);
                if first > last {
                    return Err(bad_slot());
                }
                node.slots.push((first, last));
            }
        }
        Ok(node)
    }

    /// The line as Redis writes it, without its newline.
    pub fn write(&self, out: &mut String) {
        let _ = write!(out, "{} {}:{}@{}", self.name, self.ip, self.port, self.cport);
        if let Some(hostname) = &self.hostname {
            let _ = write!(out, ",{hostname}");
        }
        out.push(' ');
        out.push_str(&flags_to_text(self.flags));
        match &self.master {
            Some(master) => {
                let _ = write!(out, " {master}");
            }
            None => out.push_str(" -"),
        }
        let link = if self.connected { "connected" } else { "disconnected" };
        let _ = write!(out, " {} {} {} {link}", self.ping_sent_ms, self.pong_received_ms, self.config_epoch);
        for &(first, last) in &self.slots {
            if first == last {
                let _ = write!(out, " {first}");
            } else {
                let _ = write!(out, " {first}-{last}");
            }
        }
        let mut moving: Vec<(u16, &str, NodeName)> = self.migrating.iter().map(|&(slot, to)| (slot, "->-", to)).chain(self.importing.iter().map(|&(slot, from)| (slot, "-<-", from))).collect();
        moving.sort_by_key(|&(slot, ..)| slot);
        for (slot, arrow, other) in moving {
            let _ = write!(out, " [{slot}{arrow}{other}]");
        }
    }
}

/// A whole `nodes.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesFile {
    pub nodes: Vec<NodeLine>,
    pub current_epoch: u64,
    pub last_vote_epoch: u64,
}

impl NodesFile {
    /// The file Redis would load: one line per node, exactly one of them
    /// `myself`, and any number of `vars` lines (the last value wins). A
    /// node with two lines is refused, where Redis would merge them.
    pub fn parse(text: &str) -> Result<NodesFile, NodesFileError> {
        let mut file = NodesFile { nodes: Vec::new(), current_epoch: 0, last_vote_epoch: 0 };
        for (index, line) in text.split('\n').enumerate() {
            let at_line = |error| NodesFileError::AtLine { line: index + 1, error: Box::new(error) };
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            match fields.first() {
                None => continue,
                Some(first) if first.eq_ignore_ascii_case("vars") => {
                    if fields.len().is_multiple_of(2) {
                        return Err(at_line(NodesFileError::BadVars));
                    }
                    for pair in fields[1..].chunks(2) {
                        if pair[0].eq_ignore_ascii_case("currentEpoch") {
                            file.current_epoch = number(pair[1]).map_err(at_line)?;
                        } else if pair[0].eq_ignore_ascii_case("lastVoteEpoch") {
                            file.last_vote_epoch = number(pair[1]).map_err(at_line)?;
                        }
                    }
                }
                Some(_) => {
                    let node = NodeLine::parse(line).map_err(at_line)?;
                    if file.nodes.iter().any(|n| n.name == node.name) {
                        return Err(at_line(NodesFileError::DuplicateNode(node.name)));
                    }
                    if node.flags & flags::MYSELF != 0 && file.nodes.iter().any(|n| n.flags & flags::MYSELF != 0) {
                        return Err(at_line(NodesFileError::TwoMyself));
                    }
                    file.nodes.push(node);
                }
            }
        }
        if !file.nodes.iter().any(|n| n.flags & flags::MYSELF != 0) {
            return Err(NodesFileError::NoMyself);
        }
        Ok(file)
    }

    /// The file as Redis writes it: every line, then the vars line, each
    /// ended by a newline.
    pub fn write(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            node.write(&mut out);
            out.push('\n');
        }
        let _ = writeln!(out, "vars currentEpoch {} lastVoteEpoch {}", self.current_epoch, self.last_vote_epoch);
        out
    }
}

fn node_name(text: &str) -> Result<NodeName, NodesFileError> {
    NodeName::parse(text.as_bytes()).ok_or_else(|| NodesFileError::BadName(text.to_owned()))
}

fn number(text: &str) -> Result<u64, NodesFileError> {
    text.parse().map_err(|_| NodesFileError::BadNumber(text.to_owned()))
}

fn slot_number(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|&slot| usize::from(slot) < SLOTS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const A: &str = "ba00363a484e2a8ef686eba4c35b9309fd1c99cc";
    const B: &str = "c34ccec00287b35c75879b4a2e6433bc29939136";

    fn round_trip(line: &str) -> NodeLine {
        let node = NodeLine::parse(line).unwrap();
        let mut out = String::new();
        node.write(&mut out);
        assert_eq!(out, line);
        node
    }

    #[test]
    fn lines_parse_and_write_back() {
        let node = round_trip(&format!("{A} 127.0.0.1:30001@40001 myself,master - 0 1795778711000 1 connected 0-199 201 204-5460 [7->-{B}] [42-<-{B}]"));
        assert_eq!(node.flags, flags::MYSELF | flags::MASTER);
        assert_eq!(node.slots, vec![(0, 199), (201, 201), (204, 5460)]);
        assert_eq!(node.migrating, vec![(7, NodeName::parse(B.as_bytes()).unwrap())]);
        assert_eq!(node.importing.len(), 1);

        let node = round_trip(&format!("{B} ::1:30002@40002,node-two.example slave,fail?,nofailover {A} 17 18 3 disconnected"));
        assert_eq!((node.ip.as_str(), node.port, node.cport), ("::1", 30002, 40002));
        assert_eq!(node.hostname.as_deref(), Some("node-two.example"));
        assert_eq!(node.master, NodeName::parse(A.as_bytes()));
        assert!(!node.connected);

        let node = round_trip(&format!("{A} :0@0 handshake,noaddr - 0 0 0 disconnected"));
        assert_eq!(node.flags, flags::NOADDR | flags::HANDSHAKE);
        assert_eq!(node.flags.count_ones(), 2);
        round_trip(&format!("{A} 1.2.3.4:1@2 noflags - 0 0 0 connected 16383"));
    }

    #[test]
    fn old_lines_and_odd_case_are_read_as_redis_reads_them() {
        let node = NodeLine::parse(&format!("{A} 1.2.3.4:7000 MASTER,Myself - 0 0 0 connected 5")).unwrap();
        assert_eq!((node.cport, node.flags), (17000, flags::MASTER | flags::MYSELF));
        let mut out = String::new();
        node.write(&mut out);
        assert_eq!(out, format!("{A} 1.2.3.4:7000@17000 myself,master - 0 0 0 connected 5"));
        let node = NodeLine::parse(&format!("{A} 1.2.3.4:7000@17000, master - 0 0 0 connected")).unwrap();
        assert_eq!(node.hostname, None);
    }

    #[test]
    fn bad_lines_are_refused() {
        let ok = format!("{A} 1.2.3.4:7000@17000 master - 0 0 0 connected");
        let cases = [
            (format!("{A} 1.2.3.4:7000@17000 master - 0 0 0"), NodesFileError::TooFewFields(7)),
            (ok.replace(A, &A.to_uppercase()), NodesFileError::BadName(A.to_uppercase())),
            (ok.replace("1.2.3.4:7000@17000", "1.2.3.4"), NodesFileError::BadAddress("1.2.3.4".into())),
            (ok.replace("7000@17000", "x@17000"), NodesFileError::BadAddress("1.2.3.4:x@17000".into())),
            (ok.replace("7000@17000", "60000"), NodesFileError::BadAddress("1.2.3.4:60000".into())),
            (ok.replace("master", "master,leader"), NodesFileError::BadFlag("leader".into())),
            (ok.replace(" - ", " nobody "), NodesFileError::BadName("nobody".into())),
            (ok.replace(" 0 0 0 ", " 0 -1 0 "), NodesFileError::BadNumber("-1".into())),
            (ok.replace("connected", "linked"), NodesFileError::BadLinkState("linked".into())),
            (format!("{ok} 16384"), NodesFileError::BadSlot("16384".into())),
            (format!("{ok} 9-3"), NodesFileError::BadSlot("9-3".into())),
            (format!("{ok} [5->-{B}"), NodesFileError::BadSlot(format!("[5->-{B}"))),
            (format!("{ok} [5=>{B}]"), NodesFileError::BadSlot(format!("[5=>{B}]"))),
            (format!("{ok} [5->-xyz]"), NodesFileError::BadName("xyz".into())),
        ];
        for (line, error) in cases {
            assert_eq!(NodeLine::parse(&line), Err(error), "{line}");
        }
    }

    #[test]
    fn files_need_one_myself_and_name_the_bad_line() {
        let me = format!("{A} 1.2.3.4:7000@17000 myself,master - 0 0 0 connected");
        let other = format!("{B} 1.2.3.4:7001@17001 master - 0 0 0 connected");
        let file = NodesFile::parse(&format!("\n{other}\n{me}\n\nVARS lastVoteEpoch 4 colour blue currentEpoch 9\n")).unwrap();
        assert_eq!((file.nodes.len(), file.current_epoch, file.last_vote_epoch), (2, 9, 4));
        assert_eq!(file.write(), format!("{other}\n{me}\nvars currentEpoch 9 lastVoteEpoch 4\n"));

        assert_eq!(NodesFile::parse(&format!("{other}\n")), Err(NodesFileError::NoMyself));
        assert_eq!(NodesFile::parse(""), Err(NodesFileError::NoMyself));
        let at = |line, error| Err(NodesFileError::AtLine { line, error: Box::new(error) });
        assert_eq!(NodesFile::parse(&format!("{me}\n{me}\n")), at(2, NodesFileError::DuplicateNode(NodeName::parse(A.as_bytes()).unwrap())));
        assert_eq!(NodesFile::parse(&format!("{me}\n{}\n", other.replace("master", "myself"))), at(2, NodesFileError::TwoMyself));
        assert_eq!(NodesFile::parse(&format!("{me}\nvars currentEpoch\n")), at(2, NodesFileError::BadVars));
        assert_eq!(NodesFile::parse(&format!("{me}\n\nvars currentEpoch x\n")), at(3, NodesFileError::BadNumber("x".into())));
        assert_eq!(NodesFile::parse(&format!("{me}\nzzz\n")), at(2, NodesFileError::TooFewFields(1)));
    }
}
