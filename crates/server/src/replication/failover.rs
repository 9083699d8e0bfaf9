//! FAILOVER: a coordinated switch of roles between this master and one of
//! its replicas, without losing a write, as Redis 6.2's
//! (`failoverCommand`, `updateFailoverStatus`).
//!
//! 1. Writes pause (held, as by CLIENT PAUSE WRITE) while the target (the
//!    one named, or the first replica to have acknowledged everything)
//!    catches up: `waiting-for-sync`.
//! 2. Once it acknowledged the stream's end (or, with FORCE, once TIMEOUT
//!    passed), this server becomes its replica (`failover-in-progress`)
//!    and PSYNCs with its own history and `FAILOVER`, which asks the
//!    target to become the master first: the target promotes itself and
//!    continues this server's history, so no full sync is needed.
//! 3. Any answer that starts a sync ends the failover and the pause;
//!    another (the target refused the PSYNC) aborts it: this server is
//!    the master again. So does a TIMEOUT without FORCE, and FAILOVER ABORT.
//!
//! The replication cron ([`tick`]) moves from 1 to 2, every 100 ms.

use parking_lot::Mutex;

use crate::command::parse::{eq, i64_arg};
use crate::command::{CmdError, CmdResult, Ctx};
use crate::pause::{Mode, Purpose};
use crate::server::{unix_ms, Server};

/// INFO's `master_failover_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    None,
    WaitForSync,
    InProgress,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::None => "no-failover",
            State::WaitForSync => "waiting-for-sync",
            State::InProgress => "failover-in-progress",
        }
    }
}

/// A failover under way.
struct Plan {
    /// The replica to hand over to (its announced address and listening
    /// port); found when it catches up if none was named.
    target: Option<(String, u16)>,
    /// TIMEOUT's end, Unix ms.
    deadline_ms: Option<u64>,
    force: bool,
    in_progress: bool,
}

#[derive(Default)]
pub struct Failover {
    plan: Mutex<Option<Plan>>,
}

impl Failover {
    pub fn state(&self) -> State {
        match &*self.plan.lock() {
            None => State::None,
            Some(plan) if plan.in_progress => State::InProgress,
            Some(_) => State::WaitForSync,
        }
    }
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms].
pub fn command(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    if server.cluster.is_some() {
        return Err(CmdError::other("ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead."));
    }
    if argv.len() == 2 && eq(argv[1], "abort") {
        if server.repl.failover.state() == State::None {
            return Err(CmdError::other("ERR No failover in progress."));
        }
        abort(server, "Failover manually aborted");
        ctx.out.ok();
        return Ok(());
    }
    let (mut timeout_ms, mut force, mut target) = (0, false, None);
    let mut args = argv[1..].iter();
    while let Some(arg) = args.next() {
        match (args.len(), arg) {
            (n, a) if n >= 1 && eq(a, "timeout") && timeout_ms == 0 => {
                timeout_ms = i64_arg(args.next().copied().unwrap_or_default())?;
                if timeout_ms <= 0 {
                    return Err(CmdError::other("ERR FAILOVER timeout must be greater than 0"));
                }
            }
            (n, a) if n >= 2 && eq(a, "to") && target.is_none() => {
                let host = String::from_utf8_lossy(args.next().copied().unwrap_or_default()).into_owned();
                let port = i64_arg(args.next().copied().unwrap_or_default())?;
                target = Some((host, port));
            }
            (_, a) if eq(a, "force") && !force => force = true,
            _ => return Err(CmdError::Syntax),
        }
    }
    let mut plan = server.repl.failover.plan.lock();
    if plan.is_some() {
        return Err(CmdError::other("ERR FAILOVER already in progress."));
    }
    if server.replica.is_replica() {
        return Err(CmdError::other("ERR FAILOVER is not valid when server is a replica."));
    }
    let replicas = server.repl.replicas();
    if replicas.is_empty() {
        return Err(CmdError::other("ERR FAILOVER requires connected replicas."));
    }
    if force && (timeout_ms == 0 || target.is_none()) {
        return Err(CmdError::other("ERR FAILOVER with force option requires both a timeout and target HOST and IP."));
    }
    let target = match target {
        Some((host, port)) => {
            let Some(replica) = replicas.iter().find(|r| r.ip == host && i64::from(r.port) == port) else {
                return Err(CmdError::other("ERR FAILOVER target HOST and PORT is not a replica."));
            };
            if replica.state() != super::ReplicaState::Online {
                return Err(CmdError::other("ERR FAILOVER target replica is not online."));
            }
            tracing::info!("FAILOVER requested to {host}:{port}.");
            Some((host, replica.port))
        }
        None => {
            tracing::info!("FAILOVER requested to any replica.");
            None
        }
    };
    let deadline_ms = (timeout_ms > 0).then(|| unix_ms() + timeout_ms as u64);
    *plan = Some(Plan { target, deadline_ms, force, in_progress: false });
    drop(plan);
    pause_writes(server);
    ctx.out.ok();
    Ok(())
}

/// The cron's step while waiting for the target: hand over once it has
/// acknowledged everything, or when TIMEOUT passes (with FORCE; without,
/// give up).
pub fn tick(server: &Server) {
    let mut guard = server.repl.failover.plan.lock();
    let Some(plan) = guard.as_mut().filter(|p| !p.in_progress) else { return };
    let end = server.repl.end();
    if plan.deadline_ms.is_some_and(|d| d <= unix_ms()) {
        if !plan.force {
            drop(guard);
            abort(server, "Replica never caught up before timeout");
            return;
        }
        let (host, port) = plan.target.clone().unwrap_or_default();
        tracing::info!("FAILOVER to {host}:{port} time out exceeded, failing over.");
        plan.in_progress = true;
        drop(guard);
        crate::replica::follow(server, host, port);
        return;
    }
    let replicas = server.repl.replicas();
    let synced = match &plan.target {
        Some((host, port)) => replicas.iter().find(|r| r.ip == *host && r.port == *port && r.ack() == end),
        None => replicas.iter().find(|r| r.ack() == end),
    };
    let Some(replica) = synced else { return };
    let (host, port) = (replica.ip.clone(), replica.port);
    tracing::info!("Failover target {host}:{port} is synced, failing over.");
    plan.target = Some((host.clone(), port));
    plan.in_progress = true;
    drop(guard);
    crate::replica::follow(server, host, port);
}

/// The target answered this server's `PSYNC ... FAILOVER`: a sync began
/// (`started`), which ends the failover, or it refused, which aborts it.
pub fn target_answered(server: &Server, started: bool) {
    if server.repl.failover.state() != State::InProgress {
        return;
    }
    match started {
        true => clear(server),
        false => abort(server, "Failover target rejected psync request"),
    }
}

/// Gives the failover up: a server that had become the target's replica is
/// the master again (Redis's `abortFailover`).
fn abort(server: &Server, why: &str) {
    let Some(plan) = server.repl.failover.plan.lock().take() else { return };
    match &plan.target {
        Some((host, port)) => tracing::info!("FAILOVER to {host}:{port} aborted: {why}"),
        None => tracing::info!("FAILOVER to any replica aborted: {why}"),
    }
    if plan.in_progress {
        crate::replica::stop_following(server);
    }
    resume_writes(server);
}

fn clear(server: &Server) {
    server.repl.failover.plan.lock().take();
    resume_writes(server);
}

/// Holds writes back until the failover ends.
fn pause_writes(server: &Server) {
    server.pauses.pause(Purpose::Failover, u64::MAX, Mode::Writes, unix_ms());
}

/// Ends the failover's pause (a CLIENT PAUSE stays).
fn resume_writes(server: &Server) {
    server.pauses.unpause(Purpose::Failover);
    server.broadcast(|| crate::client::Message::Resume);
}
