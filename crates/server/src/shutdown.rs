//! SHUTDOWN and the shutdown signals, as Redis 7.0's `prepareForShutdown`
//! and `finishShutdown`.
//!
//! Unless NOW is given (or `shutdown-timeout` is 0), a master whose
//! replicas have not all acknowledged the end of its stream first pauses
//! writes, asks each replica for its offset, and waits for them up to
//! `shutdown-timeout` seconds: a failover after the stop then loses no
//! write the master acknowledged. Then it finishes: the lagging replicas
//! are logged, the final save runs as the flags say, and the server stops.
//!
//! The clients that sent SHUTDOWN stay blocked meanwhile (they see the
//! connection close when the server stops). SHUTDOWN ABORT during the
//! wait, or a failure to finish (a final save that fails, an AOF turned on
//! whose first rewrite has not written it yet), answers each of them
//! "Errors trying to SHUTDOWN. Check logs." and the server goes on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::blocking::Waiter;
use crate::client::Message;
use crate::durability::AofState;
use crate::pause::{Mode, Purpose};
use crate::server::{unix_ms, Server};
use crate::snapshot::FinalSave;

/// SHUTDOWN's arguments, or what `shutdown-on-sigterm` and
/// `shutdown-on-sigint` say for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags {
    pub save: FinalSave,
    /// Stop without waiting for replicas.
    pub now: bool,
    /// Stop even if the final save fails.
    pub force: bool,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags { save: FinalSave::IfRules, now: false, force: false }
    }
}

impl Flags {
    /// The words of `shutdown-on-sig*`: `default`, or any of `save`,
    /// `nosave`, `now`, `force`; at least one, as Redis's.
    pub fn parse(words: &[&str]) -> Result<Flags, String> {
        const WANTED: &str = "argument(s) must be one of the following: default, save, nosave, now, force";
        if words.is_empty() {
            return Err(WANTED.into());
        }
        let mut flags = Flags::default();
        let (mut save, mut nosave) = (false, false);
        for word in words {
            match word.to_ascii_lowercase().as_str() {
                "default" => {}
                "save" => save = true,
                "nosave" => nosave = true,
                "now" => flags.now = true,
                "force" => flags.force = true,
                _ => return Err(WANTED.into()),
            }
        }
        flags.save = match (save, nosave) {
            (true, true) => return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into()),
            (true, false) => FinalSave::Save,
            (false, true) => FinalSave::NoSave,
            (false, false) => FinalSave::IfRules,
        };
        Ok(flags)
    }

    /// As CONFIG GET shows them.
    pub fn words(&self) -> String {
        let words: Vec<&str> = [
            (self.save == FinalSave::Save, "save"),
            (self.save == FinalSave::NoSave, "nosave"),
            (self.now, "now"),
            (self.force, "force"),
        ]
        .into_iter()
        .filter_map(|(on, word)| on.then_some(word))
        .collect();
        if words.is_empty() { "default".into() } else { words.join(" ") }
    }
}

/// The shutdown under way, if any.
#[derive(Default)]
pub struct Shutdown {
    /// Unix ms the wait for replicas ends at; 0 while none waits (Redis's
    /// `shutdown_mstime`).
    deadline_ms: AtomicU64,
    /// From the start of a shutdown until it fails or is aborted: the
    /// signal thread reads a second signal as Redis's "You insist...".
    active: AtomicBool,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    flags: Flags,
    /// The clients blocked in SHUTDOWN.
    blocked: Vec<Arc<Waiter>>,
}

/// How a request to shut down went on.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server is stopping.
    Stopping,
    /// Waiting for replicas, or for the shutdown already under way.
    Waiting,
    /// It could not stop; the server goes on (the blocked clients were
    /// answered).
    Failed,
}

impl Shutdown {
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// INFO's `shutdown_in_milliseconds`: what is left of the wait, while
    /// a shutdown waits.
    pub fn remaining_ms(&self, now_ms: u64) -> Option<u64> {
        match self.deadline_ms.load(Ordering::Acquire) {
            0 => None,
            deadline => Some(deadline.saturating_sub(now_ms)),
        }
    }
}

/// Starts a shutdown with `flags`; `blocked` is the wait of the client
/// that asked (SHUTDOWN), answered if the shutdown fails. A request while
/// another shutdown is under way joins it.
pub fn begin(server: &Server, flags: Flags, blocked: Option<Arc<Waiter>>) -> Outcome {
    let state = &server.shutting_down;
    let mut waiting = state.waiting.lock();
    waiting.blocked.extend(blocked);
    if state.active.swap(true, Ordering::AcqRel) {
        return Outcome::Waiting;
    }
    waiting.flags = flags;
    tracing::warn!("User requested shutdown...");
    crate::supervision::notify_systemd("STOPPING=1\n");
    let timeout_s = u64::from(server.config.read().shutdown_timeout);
    if flags.now || timeout_s == 0 || replicas_caught_up(server) {
        drop(waiting);
        return finish(server, flags);
    }
    state.deadline_ms.store(unix_ms() + timeout_s * 1000, Ordering::Release);
    // Asked while no pause holds the stream still, as Redis does.
    if server.paused(unix_ms).is_none() {
        server.repl.request_acks();
    }
    server.pauses.pause(Purpose::Shutdown, u64::MAX, Mode::Writes, unix_ms());
    tracing::info!("Waiting for replicas before shutting down.");
    Outcome::Waiting
}

/// SHUTDOWN ABORT of a shutdown waiting for replicas; false if none waits.
pub fn abort(server: &Server) -> bool {
    if take_flags(server).is_none() {
        return false;
    }
    cancel(server);
    true
}

/// Ends the wait, under the lock that `begin` and `abort` take: the
/// waiting shutdown's flags, or `None` if none waits (any more).
fn take_flags(server: &Server) -> Option<Flags> {
    let state = &server.shutting_down;
    let waiting = state.waiting.lock();
    (state.deadline_ms.swap(0, Ordering::AcqRel) != 0).then_some(waiting.flags)
}

/// Redis's `isReadyToShutdown`: every replica attached has acknowledged
/// the stream's end.
fn replicas_caught_up(server: &Server) -> bool {
    let end = server.repl.end();
    server.repl.replicas().iter().all(|r| r.ack() == end)
}

/// The replication cron's look at a shutdown waiting for replicas (as
/// Redis's serverCron's): it finishes once they caught up or the time ran
/// out. A replica is attached while one waits, so the cron runs.
pub fn tick(server: &Server) {
    let deadline = server.shutting_down.deadline_ms.load(Ordering::Acquire);
    if deadline == 0 || unix_ms() < deadline && !replicas_caught_up(server) {
        return;
    }
    if let Some(flags) = take_flags(server) {
        finish(server, flags);
    }
}

/// Redis's `finishShutdown`: the replicas' state logged, then the checks
/// and the final save; the server stops, or goes on if they fail.
fn finish(server: &Server, flags: Flags) -> Outcome {
    log_replicas(server);
    if server.aof.state() == AofState::WaitRewrite {
        if !flags.force {
            tracing::warn!("Writing initial AOF, can't exit.");
            return fail(server);
        }
        tracing::warn!("Writing initial AOF. Exit anyway.");
    }
    if crate::snapshot::prepare_shutdown(server, flags.save, flags.force).is_err() {
        return fail(server);
    }
    server.request_shutdown();
    Outcome::Stopping
}

fn log_replicas(server: &Server) {
    let replicas = server.repl.replicas();
    if replicas.is_empty() {
        return;
    }
    let end = server.repl.end();
    let now_s = unix_ms() / 1000;
    let mut lagging = 0;
    for r in &replicas {
        if r.ack() == end {
            continue;
        }
        lagging += 1;
        let online = r.state() == crate::replication::master::ReplicaState::Online;
        let lag = if online { now_s.saturating_sub(r.ack_ms() / 1000) } else { 0 };
        tracing::warn!(
            "Lagging replica {} reported offset {} behind master, lag={lag}, state={}.",
            r.addr(),
            end.saturating_sub(r.ack()),
            r.state().name()
        );
    }
    tracing::info!("{} of {} replicas are in sync when shutting down.", replicas.len() - lagging, replicas.len());
}

fn fail(server: &Server) -> Outcome {
    tracing::warn!("Errors trying to shut down the server. Check the logs for more information.");
    cancel(server);
    Outcome::Failed
}

/// Redis's `cancelShutdown`: writes go on, and every client blocked in
/// SHUTDOWN hears that it failed.
fn cancel(server: &Server) {
    let state = &server.shutting_down;
    let blocked = std::mem::take(&mut state.waiting.lock().blocked);
    state.active.store(false, Ordering::Release);
    server.shutdown_asap.store(false, Ordering::Release);
    for waiter in blocked {
        if waiter.claim() {
            let reply = b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n".to_vec();
            server.send(waiter.worker, Message::Unblock { client: waiter.client, reply, lsn: 0 });
        }
    }
    server.pauses.unpause(Purpose::Shutdown);
    server.broadcast(|| Message::Resume);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_flags_parse_and_print_as_redis_does() {
        let parse = |s: &str| Flags::parse(&s.split(' ').collect::<Vec<_>>());
        assert_eq!(parse("default").map(|f| f.words()), Ok("default".into()));
        assert_eq!(parse("now nosave").map(|f| f.words()), Ok("nosave now".into()));
        assert_eq!(parse("default now").map(|f| f.words()), Ok("now".into()));
        assert_eq!(Flags::parse(&["FORCE", "save"]).map(|f| f.words()), Ok("save force".into()));
        assert_eq!(parse("save nosave"), Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into()));
        assert!(parse("bogus").is_err());
        assert!(Flags::parse(&[]).is_err(), "no word at all");
    }
}
