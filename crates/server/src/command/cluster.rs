//! CLUSTER and its subcommands, ASKING, READONLY and READWRITE, as Redis
//! 7.0's clusterCommand (`crate::cluster` holds the state they read and
//! change).

use keel_cluster::{NodeName, SLOTS};
use keel_engine::slot::key_slot;

use super::parse::{eq, i64_arg};
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::cluster::state::{Node, State, BLACKLIST_TTL_S, MESSAGE_TYPES};
use crate::cluster::Cluster;

const ADMIN_STALE: u32 = NO_ASYNC_LOADING | ADMIN | STALE;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("cluster", -2, 0, Keys::None, "cluster", super::server::container)
        .doc("A container for cluster commands", "3.0.0")
        .subs(SUBCOMMANDS),
    cmd("asking", 1, FAST, Keys::None, "cluster", asking)
        .doc("Sent by cluster clients after an -ASK redirect", "3.0.0")
        .acl(acl::CONNECTION),
    cmd("readonly", 1, FAST | LOADING | STALE, Keys::None, "cluster", readonly)
        .doc("Enables read queries for a connection to a cluster replica node", "3.0.0")
        .acl(acl::CONNECTION),
    cmd("readwrite", 1, FAST | LOADING | STALE, Keys::None, "cluster", readwrite)
        .doc("Disables read queries for a connection to a cluster replica node", "3.0.0")
        .acl(acl::CONNECTION),
];

const SUBCOMMANDS: &[CommandSpec] = &[
    cmd("cluster|addslots", -3, ADMIN_STALE, Keys::None, "cluster", addslots)
        .doc("Assign new hash slots to receiving node", "3.0.0"),
    cmd("cluster|addslotsrange", -4, ADMIN_STALE, Keys::None, "cluster", addslotsrange)
        .doc("Assign new hash slots to receiving node", "7.0.0"),
    cmd("cluster|bumpepoch", 2, ADMIN_STALE, Keys::None, "cluster", bumpepoch)
        .doc("Advance the cluster config epoch", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|count-failure-reports", 3, ADMIN | STALE, Keys::None, "cluster", count_failure_reports)
        .doc("Return the number of failure reports active for a given node", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|countkeysinslot", 3, STALE, Keys::None, "cluster", countkeysinslot)
        .doc("Return the number of local keys in the specified hash slot", "3.0.0"),
    cmd("cluster|delslots", -3, ADMIN_STALE, Keys::None, "cluster", delslots)
        .doc("Set hash slots as unbound in receiving node", "3.0.0"),
    cmd("cluster|delslotsrange", -4, ADMIN_STALE, Keys::None, "cluster", delslotsrange)
        .doc("Set hash slots as unbound in receiving node", "7.0.0"),
    cmd("cluster|failover", -2, ADMIN_STALE, Keys::None, "cluster", failover)
        .doc("Forces a replica to perform a manual failover of its master.", "3.0.0"),
    cmd("cluster|flushslots", 2, ADMIN_STALE, Keys::None, "cluster", flushslots)
        .doc("Delete a node's own slots information", "3.0.0"),
    cmd("cluster|forget", 3, ADMIN_STALE, Keys::None, "cluster", forget)
        .doc("Remove a node from the nodes table", "3.0.0"),
    cmd("cluster|getkeysinslot", 4, STALE, Keys::None, "cluster", getkeysinslot)
        .doc("Return local key names in the specified hash slot", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|help", 2, LOADING | STALE, Keys::None, "cluster", help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
    cmd("cluster|info", 2, STALE, Keys::None, "cluster", info)
        .doc("Provides info about Redis Cluster node state", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|keyslot", 3, STALE, Keys::None, "cluster", keyslot)
        .doc("Returns the hash slot of the specified key", "3.0.0"),
    cmd("cluster|links", 2, STALE, Keys::None, "cluster", links)
        .doc("Returns a list of all TCP links to and from peer nodes in cluster", "7.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|meet", -4, ADMIN_STALE, Keys::None, "cluster", meet)
        .doc("Force a node cluster to handshake with another node", "3.0.0"),
    cmd("cluster|myid", 2, STALE, Keys::None, "cluster", myid).doc("Return the node id", "3.0.0"),
    cmd("cluster|nodes", 2, STALE, Keys::None, "cluster", nodes)
        .doc("Get Cluster config for the node", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|replicas", 3, ADMIN | STALE, Keys::None, "cluster", replicas)
        .doc("List replica nodes of the specified master node", "5.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|replicate", 3, ADMIN_STALE, Keys::None, "cluster", replicate)
        .doc("Reconfigure a node as a replica of the specified master node", "3.0.0"),
    cmd("cluster|reset", -2, ADMIN | STALE | NOSCRIPT, Keys::None, "cluster", reset)
        .doc("Reset a Redis Cluster node", "3.0.0"),
    cmd("cluster|saveconfig", 2, ADMIN_STALE, Keys::None, "cluster", saveconfig)
        .doc("Forces the node to save cluster state on disk", "3.0.0"),
    cmd("cluster|set-config-epoch", 3, ADMIN_STALE, Keys::None, "cluster", set_config_epoch)
        .doc("Set the configuration epoch in a new node", "3.0.0"),
    cmd("cluster|setslot", -4, ADMIN_STALE, Keys::None, "cluster", setslot)
        .doc("Bind a hash slot to a specific node", "3.0.0"),
    cmd("cluster|shards", 2, STALE, Keys::None, "cluster", shards)
        .doc("Get array of cluster slots to node mappings", "7.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|slaves", 3, ADMIN | STALE, Keys::None, "cluster", replicas)
        .doc("List replica nodes of the specified master node", "3.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("cluster|slots", 2, STALE, Keys::None, "cluster", slots)
        .doc("Get array of Cluster slot to node mappings", "3.0.0")
        .tips(&["nondeterministic_output"]),
];

const DISABLED: &str = "ERR This instance has cluster support disabled";

fn cluster<'a>(ctx: &Ctx<'a>) -> Result<&'a Cluster, CmdError> {
    ctx.server.cluster.as_deref().ok_or_else(|| CmdError::other(DISABLED))
}

/// Runs `f` on the cluster's state; its error is the command's reply.
fn with_state<R>(ctx: &mut Ctx<'_>, f: impl FnOnce(&mut State) -> Result<R, String>) -> Result<R, CmdError> {
    let cluster = cluster(ctx)?;
    cluster.with(ctx.server, f).map_err(|e| CmdError::other(format!("ERR {e}")))
}

fn asking(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    ctx.client.asking = true;
    ctx.out.ok();
    Ok(())
}

fn readonly(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    ctx.client.readonly = true;
    ctx.out.ok();
    Ok(())
}

fn readwrite(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    ctx.client.readonly = false;
    ctx.out.ok();
    Ok(())
}

/// Redis's getSlotOrReply.
fn slot_arg(arg: &[u8]) -> Result<u16, String> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|s| (0..SLOTS as i64).contains(s))
        .map(|s| s as u16)
        .ok_or_else(|| "Invalid or out of range slot".to_string())
}

fn node_arg(st: &State, arg: &[u8]) -> Option<NodeName> {
    let name: [u8; keel_cluster::NAME_LEN] = arg.try_into().ok()?;
    let name = NodeName(name);
    st.nodes.contains_key(&name).then_some(name)
}

fn unknown(arg: &[u8]) -> String {
    format!("Unknown node {}", String::from_utf8_lossy(arg))
}

fn addslots(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let ranges: Vec<(&[u8], &[u8])> = argv[2..].iter().map(|a| (*a, *a)).collect();
    update_slots(ctx, &ranges, false)
}

fn delslots(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let ranges: Vec<(&[u8], &[u8])> = argv[2..].iter().map(|a| (*a, *a)).collect();
    update_slots(ctx, &ranges, true)
}

fn addslotsrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    slots_in_ranges(ctx, argv, false)
}

fn delslotsrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    slots_in_ranges(ctx, argv, true)
}

fn slots_in_ranges(ctx: &mut Ctx<'_>, argv: &[&[u8]], del: bool) -> CmdResult {
    if argv.len() % 2 == 1 {
        return Err(CmdError::Arity(format!("cluster|{}", String::from_utf8_lossy(argv[1]).to_lowercase())));
    }
    let ranges: Vec<(&[u8], &[u8])> = argv[2..].chunks(2).map(|p| (p[0], p[1])).collect();
    update_slots(ctx, &ranges, del)
}

/// ADDSLOTS, DELSLOTS and their RANGE forms: every slot is checked
/// before any changes, as Redis's checkSlotAssignmentsOrReply.
fn update_slots(ctx: &mut Ctx<'_>, ranges: &[(&[u8], &[u8])], del: bool) -> CmdResult {
    with_state(ctx, |st| {
        let mut parsed = Vec::new();
        for (from, to) in ranges {
            let from_slot = slot_arg(from)?;
            let to_slot = slot_arg(to)?;
            parsed.push((from_slot, to_slot));
        }
        let mut seen = vec![false; SLOTS];
        for &(from, to) in &parsed {
            if from > to {
                return Err(format!("start slot number {from} is greater than end slot number {to}"));
            }
            for slot in from..=to {
                let owned = st.owners[slot as usize].is_some();
                if del && !owned {
                    return Err(format!("Slot {slot} is already unassigned"));
                }
                if !del && owned {
                    return Err(format!("Slot {slot} is already busy"));
                }
                if std::mem::replace(&mut seen[slot as usize], true) {
                    return Err(format!("Slot {slot} specified multiple times"));
                }
            }
        }
        for (slot, _) in seen.iter().enumerate().filter(|(_, s)| **s) {
            let slot = slot as u16;
            st.importing.remove(&slot);
            if del {
                st.del_slot(slot);
            } else {
                st.add_slot(st.myself, slot);
            }
        }
        st.dirty = true;
        st.update_state = true;
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn bumpepoch(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let (bumped, epoch) = with_state(ctx, |st| {
        let bumped = st.bump_epoch_without_consensus();
        Ok((bumped, st.me().config_epoch))
    })?;
    ctx.out.simple(&format!("{} {epoch}", if bumped { "BUMPED" } else { "STILL" }));
    Ok(())
}

fn count_failure_reports(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let count = with_state(ctx, |st| {
        let name = node_arg(st, argv[2]).ok_or_else(|| unknown(argv[2]))?;
        let validity = st.env.node_timeout * 2;
        let now = st.env.now;
        Ok(st.nodes[&name].fail_reports.iter().filter(|(_, at)| now.saturating_sub(*at) <= validity).count())
    })?;
    ctx.out.int(count as i64);
    Ok(())
}

fn countkeysinslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    let slot = i64_arg(argv[2])?;
    if !(0..SLOTS as i64).contains(&slot) {
        return Err(CmdError::other("ERR Invalid slot"));
    }
    let count = crate::cluster::count_keys_in_slot(ctx.server, slot as u16);
    ctx.out.int(count as i64);
    Ok(())
}

fn getkeysinslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    let slot = i64_arg(argv[2])?;
    let max = i64_arg(argv[3])?;
    if !(0..SLOTS as i64).contains(&slot) || max < 0 {
        return Err(CmdError::other("ERR Invalid slot or number of keys"));
    }
    let slot = slot as u16;
    let index = ctx.server.keyspace.shard_of_slot(slot);
    let keys: Vec<Box<[u8]>> = {
        let mut locked = ctx.server.keyspace.lock_one(index);
        let db = locked.shard(index).db(0);
        db.iter().filter(|(k, _)| key_slot(k) == slot).take(max as usize).map(|(k, _)| Box::from(k)).collect()
    };
    ctx.out.array(keys.len());
    for key in &keys {
        ctx.out.bulk(key);
    }
    Ok(())
}

fn failover(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (force, takeover) = match argv.get(2) {
        None => (false, false),
        Some(a) if eq(a, "force") => (true, false),
        Some(a) if eq(a, "takeover") => (true, true),
        Some(_) if argv.len() == 3 => return Err(CmdError::Syntax),
        Some(_) => return Err(CmdError::subcommand_syntax(argv)),
    };
    with_state(ctx, |st| {
        let me = st.me();
        if me.is_master() {
            return Err("You should send CLUSTER FAILOVER to a replica".into());
        }
        let Some(master) = me.master.and_then(|m| st.nodes.get(&m)) else {
            return Err("I'm a replica but my master is unknown to me".into());
        };
        if !force && (master.failed() || master.link.is_none()) {
            return Err("Master is down or failed, please use CLUSTER FAILOVER FORCE".into());
        }
        tracing::warn!("Manual failover user request accepted.");
        if takeover {
            tracing::warn!("Taking over the master (user request).");
            st.bump_epoch_without_consensus();
            st.replace_my_master();
        } else {
            st.start_manual_failover(force);
        }
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn flushslots(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let cluster = cluster(ctx)?;
    if crate::cluster::keys_in_db(ctx.server, 0) != 0 {
        return Err(CmdError::other("ERR DB must be empty to perform CLUSTER FLUSHSLOTS."));
    }
    cluster.with(ctx.server, |st| {
        for slot in 0..SLOTS as u16 {
            if st.owners[slot as usize] == Some(st.myself) {
                st.del_slot(slot);
            }
        }
        st.dirty = true;
        st.update_state = true;
    });
    ctx.out.ok();
    Ok(())
}

fn forget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    with_state(ctx, |st| {
        let name = node_arg(st, argv[2]).ok_or_else(|| unknown(argv[2]))?;
        if name == st.myself {
            return Err("I tried hard but I can't forget myself...".into());
        }
        if st.me().is_replica() && st.me().master == Some(name) {
            return Err("Can't forget my master!".into());
        }
        st.blacklist.insert(name, st.env.now / 1000 + BLACKLIST_TTL_S);
        st.del_node(&name);
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    super::server::reply_help(ctx, argv[0], HELP);
    Ok(())
}

const HELP: &[&str] = &[
    "ADDSLOTS <slot> [<slot> ...]",
    "    Assign slots to current node.",
    "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Assign slots which are between <start-slot> and <end-slot> to current node.",
    "BUMPEPOCH",
    "    Advance the cluster config epoch.",
    "COUNT-FAILURE-REPORTS <node-id>",
    "    Return number of failure reports for <node-id>.",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "DELSLOTS <slot> [<slot> ...]",
    "    Delete slots information from current node.",
    "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
    "FAILOVER [FORCE|TAKEOVER]",
    "    Promote current replica node to being a master.",
    "FORGET <node-id>",
    "    Remove a node from the cluster.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "FLUSHSLOTS",
    "    Delete current node own slots information.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MEET <ip> <port> [<bus-port>]",
    "    Connect nodes into a working cluster.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "REPLICATE <node-id>",
    "    Configure current node as replica to <node-id>.",
    "RESET [HARD|SOFT]",
    "    Reset current node (default: soft).",
    "SET-CONFIG-EPOCH <epoch>",
    "    Set config epoch of current node.",
    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
    "    Set slot state.",
    "REPLICAS <node-id>",
    "    Return <node-id> replicas.",
    "SAVECONFIG",
    "    Force saving cluster configuration on disk.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "LINKS",
    "    Return information about all network links between this node and its peers.",
    "    Output format is an array where each array element is a map containing attributes of a link",
];

/// Redis's clusterGetMessageTypeString.
const MESSAGE_NAMES: [&str; MESSAGE_TYPES] =
    ["ping", "pong", "meet", "fail", "publish", "auth-req", "auth-ack", "update", "mfstart", "module", "publishshard"];

fn info(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let text = with_state(ctx, |st| Ok(info_text(st)))?;
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

fn info_text(st: &State) -> String {
    let (mut assigned, mut ok, mut pfail, mut fail) = (0, 0, 0, 0);
    for owner in st.owners.iter().flatten() {
        assigned += 1;
        let n = &st.nodes[owner];
        if n.failed() {
            fail += 1;
        } else if n.timed_out() {
            pfail += 1;
        } else {
            ok += 1;
        }
    }
    let me = st.me();
    let my_epoch = match me.master.and_then(|m| st.nodes.get(&m)).filter(|_| me.is_replica()) {
        Some(master) => master.config_epoch,
        None => me.config_epoch,
    };
    let mut out = format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{ok}\r\n\
         cluster_slots_pfail:{pfail}\r\ncluster_slots_fail:{fail}\r\ncluster_known_nodes:{}\r\n\
         cluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{my_epoch}\r\n",
        if st.ok { "ok" } else { "fail" },
        st.nodes.len(),
        st.size,
        st.current_epoch,
    );
    for (counts, way) in [(&st.stats_sent, "sent"), (&st.stats_received, "received")] {
        for (name, count) in MESSAGE_NAMES.iter().zip(counts.iter()).filter(|(_, c)| **c > 0) {
            out.push_str(&format!("cluster_stats_messages_{name}_{way}:{count}\r\n"));
        }
        out.push_str(&format!("cluster_stats_messages_{way}:{}\r\n", counts.iter().sum::<u64>()));
    }
    out.push_str(&format!("total_cluster_links_buffer_limit_exceeded:{}\r\n", st.links_buffer_limit_exceeded));
    out
}

fn keyslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    cluster(ctx)?;
    ctx.out.int(i64::from(key_slot(argv[2])));
    Ok(())
}

fn links(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let rows = with_state(ctx, |st| {
        let mut rows = Vec::new();
        for node in st.nodes.values() {
            for (id, direction) in [(node.link, "to"), (node.inbound_link, "from")] {
                let Some(link) = id.and_then(|id| st.links.get(&id)) else { continue };
                rows.push((direction, node.name, link.ctime, link.pending_out()));
            }
        }
        Ok(rows)
    })?;
    ctx.out.array(rows.len());
    for (direction, name, ctime, pending) in rows {
        ctx.out.map(6);
        ctx.out.bulk(b"direction");
        ctx.out.bulk(direction.as_bytes());
        ctx.out.bulk(b"node");
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(b"create-time");
        ctx.out.int(ctime as i64);
        ctx.out.bulk(b"events");
        ctx.out.bulk(if pending > 0 { b"rw" } else { b"r" });
        ctx.out.bulk(b"send-buffer-allocated");
        ctx.out.int(pending as i64);
        ctx.out.bulk(b"send-buffer-used");
        ctx.out.int(pending as i64);
    }
    Ok(())
}

fn meet(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() > 5 {
        return Err(CmdError::subcommand_syntax(argv));
    }
    let text = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
    let port = i64_arg(argv[3]).map_err(|_| CmdError::other(format!("ERR Invalid TCP base port specified: {}", text(argv[3]))))?;
    let cport = match argv.get(4) {
        Some(a) => i64_arg(a).map_err(|_| CmdError::other(format!("ERR Invalid TCP bus port specified: {}", text(a))))?,
        None => port + 10_000,
    };
    let ip = text(argv[2]);
    let valid = ip.parse::<std::net::IpAddr>().is_ok() && (0..=65535).contains(&port) && (0..=65535).contains(&cport) && port != 0 && cport != 0;
    if !valid {
        return Err(CmdError::other(format!("ERR Invalid node address specified: {ip}:{}", text(argv[3]))));
    }
    let ip = ip.parse::<std::net::IpAddr>().map(|a| a.to_string()).unwrap_or(ip);
    with_state(ctx, |st| {
        st.start_handshake(&ip, port as u16, cport as u16);
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn myid(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let name = with_state(ctx, |st| Ok(st.myself))?;
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

fn nodes(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let use_pport = crate::cluster::use_pport(&ctx.server.config.read(), ctx.client.tls);
    let text = with_state(ctx, |st| {
        let mut out = String::new();
        let mut all: Vec<&Node> = st.nodes.values().collect();
        all.sort_by_key(|n| (n.name != st.myself, n.name));
        for node in all {
            crate::cluster::node_line(st, node, use_pport).write(&mut out);
            out.push('\n');
        }
        Ok(out)
    })?;
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

fn replicas(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let use_pport = crate::cluster::use_pport(&ctx.server.config.read(), ctx.client.tls);
    let lines = with_state(ctx, |st| {
        let name = node_arg(st, argv[2]).ok_or_else(|| unknown(argv[2]))?;
        if st.nodes[&name].is_replica() {
            return Err("The specified node is not a master".into());
        }
        let mut lines = Vec::new();
        for replica in st.replicas_of(&name) {
            let mut line = String::new();
            crate::cluster::node_line(st, replica, use_pport).write(&mut line);
            lines.push(line);
        }
        Ok(lines)
    })?;
    ctx.out.array(lines.len());
    for line in lines {
        ctx.out.bulk(line.as_bytes());
    }
    Ok(())
}

fn replicate(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let keys = crate::cluster::keys_in_db(ctx.server, 0);
    with_state(ctx, |st| {
        let name = node_arg(st, argv[2]).ok_or_else(|| unknown(argv[2]))?;
        if name == st.myself {
            return Err("Can't replicate myself".into());
        }
        if st.nodes[&name].is_replica() {
            return Err("I can only replicate a master, not a replica.".into());
        }
        if st.me().is_master() && (st.me().numslots != 0 || keys != 0) {
            return Err("To set a master the node must be empty and without assigned slots.".into());
        }
        st.set_my_master(name);
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn reset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let hard = match argv.get(2) {
        None => false,
        Some(a) if eq(a, "hard") => true,
        Some(a) if eq(a, "soft") => false,
        Some(_) if argv.len() == 3 => return Err(CmdError::Syntax),
        Some(_) => return Err(CmdError::subcommand_syntax(argv)),
    };
    let cluster = cluster(ctx)?;
    let is_master = cluster.with(ctx.server, |st| st.me().is_master());
    if is_master && crate::cluster::keys_in_db(ctx.server, 0) != 0 {
        return Err(CmdError::other("ERR CLUSTER RESET can't be called with master nodes containing keys"));
    }
    let was_replica = cluster.with(ctx.server, |st| {
        let was_replica = st.me().is_replica();
        st.reset(hard);
        was_replica
    });
    if was_replica {
        // As Redis: a replica that resets forgets its master's data.
        let mut client = crate::client::Client::new(std::sync::Arc::new(crate::client::ClientInfo::detached(0)), true);
        crate::command::execute(ctx.server, ctx.stats, &mut client, &mut Vec::new(), &[b"FLUSHALL"], ctx.now_ms);
    }
    ctx.out.ok();
    Ok(())
}

fn saveconfig(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    with_state(ctx, |st| crate::cluster::save(st).map_err(|e| format!("error saving the cluster node config: {e}")))?;
    ctx.out.ok();
    Ok(())
}

fn set_config_epoch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let epoch = i64_arg(argv[2])?;
    with_state(ctx, |st| {
        if epoch < 0 {
            return Err(format!("Invalid config epoch specified: {epoch}"));
        }
        if st.nodes.len() > 1 {
            return Err("The user can assign a config epoch only when the node does not know any other node.".into());
        }
        if st.me().config_epoch != 0 {
            return Err("Node config epoch is already non-zero".into());
        }
        let epoch = epoch as u64;
        st.me_mut().config_epoch = epoch;
        tracing::warn!("configEpoch set to {epoch} via CLUSTER SET-CONFIG-EPOCH");
        st.current_epoch = st.current_epoch.max(epoch);
        st.dirty = true;
        st.update_state = true;
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

fn setslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let slot = slot_arg(argv[2]).map_err(|e| CmdError::other(format!("ERR {e}")))?;
    // Counted before the cluster lock: no shard lock is taken under it.
    let keys_in_slot = crate::cluster::count_keys_in_slot(ctx.server, slot);
    with_state(ctx, |st| {
        if st.me().is_replica() {
            return Err("Please use SETSLOT only with masters.".into());
        }
        let action = argv[3];
        let target = || -> Result<NodeName, String> {
            let name = node_arg(st, argv[4]).ok_or_else(|| format!("I don't know about node {}", String::from_utf8_lossy(argv[4])))?;
            if st.nodes[&name].is_replica() {
                return Err("Target node is not a master".into());
            }
            Ok(name)
        };
        let mine = st.owners[slot as usize] == Some(st.myself);
        if eq(action, "migrating") && argv.len() == 5 {
            if !mine {
                return Err(format!("I'm not the owner of hash slot {slot}"));
            }
            let to = target()?;
            st.migrating.insert(slot, to);
        } else if eq(action, "importing") && argv.len() == 5 {
            if mine {
                return Err(format!("I'm already the owner of hash slot {slot}"));
            }
            let from = target()?;
            st.importing.insert(slot, from);
        } else if eq(action, "stable") && argv.len() == 4 {
            st.importing.remove(&slot);
            st.migrating.remove(&slot);
        } else if eq(action, "node") && argv.len() == 5 {
            let name = node_arg(st, argv[4]).ok_or_else(|| unknown(argv[4]))?;
            if st.nodes[&name].is_replica() {
                return Err("Target node is not a master".into());
            }
            if mine && name != st.myself && keys_in_slot != 0 {
                return Err(format!(
                    "Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
                ));
            }
            if keys_in_slot == 0 {
                st.migrating.remove(&slot);
            }
            st.del_slot(slot);
            st.add_slot(name, slot);
            let allow_migration = st.env.allow_replica_migration;
            if mine && name != st.myself && st.me().numslots == 0 && allow_migration {
                tracing::warn!("Configuration change detected. Reconfiguring myself as a replica of {name}");
                st.set_my_master(name);
            }
            if name == st.myself && st.importing.remove(&slot).is_some() {
                if st.bump_epoch_without_consensus() {
                    tracing::warn!("configEpoch updated after importing slot {slot}");
                }
                st.broadcast_pong(false);
            }
        } else {
            return Err("Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP".into());
        }
        st.dirty = true;
        st.update_state = true;
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

/// Which address CLUSTER SLOTS and SHARDS give first
/// (`cluster-preferred-endpoint-type`).
fn endpoint_type(ctx: &Ctx<'_>) -> String {
    ctx.server.config.read().cluster.preferred_endpoint.clone()
}

/// Redis's isReplicaAvailable: a replica that is not failing and has
/// data.
fn available(st: &State, node: &Node) -> bool {
    let offset = if node.name == st.myself { st.env.repl_offset } else { node.repl_offset };
    !node.failed() && offset != 0
}

fn slots(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let endpoint = endpoint_type(ctx);
    let use_pport = crate::cluster::use_pport(&ctx.server.config.read(), ctx.client.tls);
    let ranges = with_state(ctx, |st| {
        let mut ranges: Vec<(u16, u16, Vec<Endpoint>)> = Vec::new();
        let mut start = 0usize;
        while start < SLOTS {
            let Some(owner) = st.owners[start] else {
                start += 1;
                continue;
            };
            let mut end = start;
            while end + 1 < SLOTS && st.owners[end + 1] == Some(owner) {
                end += 1;
            }
            let master = &st.nodes[&owner];
            let mut nodes = vec![Endpoint::of(master, use_pport)];
            nodes.extend(st.replicas_of(&owner).filter(|r| available(st, r)).map(|r| Endpoint::of(r, use_pport)));
            ranges.push((start as u16, end as u16, nodes));
            start = end + 1;
        }
        Ok(ranges)
    })?;
    ctx.out.array(ranges.len());
    for (start, end, nodes) in ranges {
        ctx.out.array(2 + nodes.len());
        ctx.out.int(i64::from(start));
        ctx.out.int(i64::from(end));
        for node in nodes {
            node.reply(ctx, &endpoint);
        }
    }
    Ok(())
}

/// A node as CLUSTER SLOTS lists it (Redis's addNodeToNodeReply).
struct Endpoint {
    ip: String,
    hostname: String,
    port: u16,
    name: NodeName,
}

impl Endpoint {
    fn of(node: &Node, use_pport: bool) -> Endpoint {
        Endpoint { ip: node.ip.clone(), hostname: node.hostname.clone(), port: node.client_port(use_pport), name: node.name }
    }

    fn reply(&self, ctx: &mut Ctx<'_>, endpoint: &str) {
        ctx.out.array(4);
        match endpoint {
            "ip" => ctx.out.bulk(self.ip.as_bytes()),
            "hostname" if self.hostname.is_empty() => ctx.out.bulk(b"?"),
            "hostname" => ctx.out.bulk(self.hostname.as_bytes()),
            _ => ctx.out.null(),
        }
        ctx.out.int(i64::from(self.port));
        ctx.out.bulk(self.name.as_bytes());
        let with_ip = endpoint != "ip";
        let with_hostname = endpoint != "hostname" && !self.hostname.is_empty();
        ctx.out.map(usize::from(with_ip) + usize::from(with_hostname));
        if with_ip {
            ctx.out.bulk(b"ip");
            ctx.out.bulk(self.ip.as_bytes());
        }
        if with_hostname {
            ctx.out.bulk(b"hostname");
            ctx.out.bulk(self.hostname.as_bytes());
        }
    }
}

/// One node of a shard, as CLUSTER SHARDS describes it.
struct ShardNode {
    fields: Vec<(&'static str, ShardField)>,
}

enum ShardField {
    Text(String),
    Int(i64),
}

fn shards(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let endpoint = endpoint_type(ctx);
    let tls_cluster = ctx.server.config.read().tls.cluster;
    let shards = with_state(ctx, |st| {
        let mut shards = Vec::new();
        let mut masters: Vec<&Node> = st.nodes.values().filter(|n| n.is_master()).collect();
        masters.sort_by_key(|n| n.name);
        for master in masters {
            let ranges = master.slots.ranges();
            let mut members = vec![master];
            members.extend(st.replicas_of(&master.name));
            let nodes: Vec<ShardNode> = members.into_iter().map(|n| shard_node(st, n, &endpoint, tls_cluster)).collect();
            shards.push((ranges, nodes));
        }
        Ok(shards)
    })?;
    ctx.out.array(shards.len());
    for (ranges, nodes) in shards {
        ctx.out.map(2);
        ctx.out.bulk(b"slots");
        ctx.out.array(ranges.len() * 2);
        for (from, to) in ranges {
            ctx.out.int(i64::from(from));
            ctx.out.int(i64::from(to));
        }
        ctx.out.bulk(b"nodes");
        ctx.out.array(nodes.len());
        for node in nodes {
            ctx.out.map(node.fields.len());
            for (name, value) in node.fields {
                ctx.out.bulk(name.as_bytes());
                match value {
                    ShardField::Text(t) => ctx.out.bulk(t.as_bytes()),
                    ShardField::Int(i) => ctx.out.int(i),
                }
            }
        }
    }
    Ok(())
}

/// `tls_cluster`: the nodes' announced ports are TLS ones, beside their
/// plaintext `pport` (Redis takes its own setting for theirs).
fn shard_node(st: &State, node: &Node, endpoint: &str, tls_cluster: bool) -> ShardNode {
    use ShardField::{Int, Text};
    let preferred = node.endpoint(endpoint).to_string();
    let offset = if node.name == st.myself { st.env.repl_offset } else { node.repl_offset };
    let health = if node.failed() {
        "fail"
    } else if node.is_replica() && offset == 0 {
        "loading"
    } else {
        "online"
    };
    let mut fields = vec![("id", Text(node.name.to_string()))];
    let (port, tls_port) = if tls_cluster { (node.pport, node.port) } else { (node.port, 0) };
    if port != 0 {
        fields.push(("port", Int(i64::from(port))));
    }
    if tls_port != 0 {
        fields.push(("tls-port", Int(i64::from(tls_port))));
    }
    fields.push(("ip", Text(node.ip.clone())));
    fields.push(("endpoint", Text(preferred)));
    if !node.hostname.is_empty() {
        fields.push(("hostname", Text(node.hostname.clone())));
    }
    fields.push(("role", Text(if node.is_replica() { "replica" } else { "master" }.into())));
    fields.push(("replication-offset", Int(offset as i64)));
    fields.push(("health", Text(health.into())));
    ShardNode { fields }
}
