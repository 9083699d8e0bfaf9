//! Redis 7.0 functions: the server's libraries (FUNCTION LOAD, DELETE,
//! FLUSH, RESTORE) and what FCALL finds in them.
//!
//! A library is its code, `#!lua name=<name>` first; loading it runs the
//! code once, and its `redis.register_function` calls name its functions.
//! The registry keeps the code and what was registered; each thread's
//! interpreter loads the code again before its first FCALL after a change
//! (`engine.rs`), as it compiles EVAL's scripts.
//!
//! The commands that change the libraries hold every shard (ALL_SHARDS),
//! so that a snapshot's instant S, taken under every shard lock, sees
//! them before or after: the libraries a snapshot writes (`snapshot()`)
//! are those of S. They are journaled and replicated as they came, and a
//! replay runs them again (an RDB base's libraries replay as FUNCTION
//! LOAD REPLACE).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::command::CmdError;
use crate::server::Server;

pub struct Library {
    pub name: String,
    /// The whole code, shebang line included (FUNCTION LIST WITHCODE,
    /// FUNCTION DUMP, RDB).
    pub code: Vec<u8>,
    pub functions: Vec<FunctionInfo>,
}

impl Library {
    /// The code after the shebang line (its line end kept, so that line
    /// numbers stay the user's).
    pub fn body(&self) -> &[u8] {
        let at = self.code.iter().position(|&b| b == b'\n').unwrap_or(self.code.len());
        &self.code[at..]
    }
}

#[derive(Clone)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<Vec<u8>>,
    /// `super::flags` bits.
    pub flags: u32,
}

#[derive(Default)]
struct Registry {
    /// By name: FUNCTION LIST and DUMP in name order.
    libraries: BTreeMap<String, Arc<Library>>,
    /// Function name, lower-cased (FCALL finds functions case-
    /// insensitively, as Redis), to its library.
    functions: HashMap<String, Arc<Library>>,
}

impl Registry {
    fn insert(&mut self, library: Arc<Library>) {
        for f in &library.functions {
            self.functions.insert(f.name.to_ascii_lowercase(), library.clone());
        }
        self.libraries.insert(library.name.clone(), library);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Library>> {
        let library = self.libraries.remove(name)?;
        for f in &library.functions {
            self.functions.remove(&f.name.to_ascii_lowercase());
        }
        Some(library)
    }
}

#[derive(Default)]
pub struct Functions {
    registry: Mutex<Registry>,
    /// Bumped by every change: interpreters reload the libraries.
    generation: AtomicU64,
}

/// FUNCTION RESTORE's policy for libraries that exist already.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    Flush,
    Append,
    Replace,
}

impl Functions {
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Every library, in name order.
    pub fn snapshot(&self) -> Vec<Arc<Library>> {
        self.registry.lock().libraries.values().cloned().collect()
    }

    /// The function FCALL names, and its library.
    pub fn find(&self, name: &[u8]) -> Option<(Arc<Library>, FunctionInfo)> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        let library = self.registry.lock().functions.get(&name)?.clone();
        let info = library.functions.iter().find(|f| f.name.eq_ignore_ascii_case(&name))?.clone();
        Some((library, info))
    }

    /// The bytes the libraries keep outside the interpreters: their code
    /// and names (MEMORY STATS `functions.caches`, INFO
    /// `used_memory_functions`).
    pub fn memory(&self) -> usize {
        let registry = self.registry.lock();
        registry
            .libraries
            .values()
            .map(|l| {
                let functions: usize =
                    l.functions.iter().map(|f| f.name.len() + f.description.as_ref().map_or(0, Vec::len)).sum();
                l.name.len() + l.code.len() + functions
            })
            .sum()
    }

    /// Counts for INFO and FUNCTION STATS: (libraries, functions).
    pub fn counts(&self) -> (usize, usize) {
        let registry = self.registry.lock();
        (registry.libraries.len(), registry.functions.len())
    }

    /// FUNCTION LOAD: checks and runs `code` (in this thread's
    /// interpreter), then adds its library. Returns the library's name.
    pub fn load(&self, server: &Server, code: &[u8], replace: bool) -> Result<String, CmdError> {
        let library = prepare(server, code)?;
        let mut registry = self.registry.lock();
        let name = add(&mut registry, library, replace).map_err(CmdError::Other)?;
        self.changed();
        Ok(name)
    }

    /// FUNCTION DELETE.
    pub fn delete(&self, name: &[u8]) -> Result<(), CmdError> {
        let name = String::from_utf8_lossy(name);
        self.registry.lock().remove(&name).ok_or_else(|| CmdError::other("ERR Library not found"))?;
        self.changed();
        Ok(())
    }

    /// FUNCTION FLUSH, and a replica's full sync.
    pub fn flush(&self) {
        *self.registry.lock() = Registry::default();
        self.changed();
    }

    /// FUNCTION RESTORE: every library of `codes` or none.
    pub fn restore(&self, server: &Server, codes: &[Vec<u8>], policy: RestorePolicy) -> Result<(), CmdError> {
        let libraries: Vec<Library> = codes.iter().map(|code| prepare(server, code)).collect::<Result<_, _>>()?;
        let mut registry = self.registry.lock();
        let mut next = match policy {
            RestorePolicy::Flush => Registry::default(),
            _ => Registry { libraries: registry.libraries.clone(), functions: registry.functions.clone() },
        };
        for library in libraries {
            if policy == RestorePolicy::Append && next.libraries.contains_key(&library.name) {
                return Err(CmdError::other(format!("ERR Library {} already exists", library.name)));
            }
            add(&mut next, library, true).map_err(CmdError::Other)?;
        }
        *registry = next;
        self.changed();
        Ok(())
    }
}

/// Adds `library` to `registry`, replacing one of its name if `replace`;
/// refuses a function name another library has.
fn add(registry: &mut Registry, library: Library, replace: bool) -> Result<String, String> {
    if registry.libraries.contains_key(&library.name) && !replace {
        return Err(format!("ERR Library '{}' already exists", library.name));
    }
    for f in &library.functions {
        if registry.functions.get(&f.name.to_ascii_lowercase()).is_some_and(|owner| owner.name != library.name) {
            return Err(format!("ERR Function {} already exists", f.name));
        }
    }
    registry.remove(&library.name);
    let name = library.name.clone();
    registry.insert(Arc::new(library));
    Ok(name)
}

/// Redis's `functionsVerifyName`: letters, digits and `_`, at least one.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The library of `code`: its metadata checked, its code run to register
/// its functions.
fn prepare(server: &Server, code: &[u8]) -> Result<Library, CmdError> {
    let (name, body_at) = metadata(code).map_err(CmdError::Other)?;
    let functions = super::engine::register_library(server, &code[body_at..])?;
    if functions.is_empty() {
        return Err(CmdError::other("ERR No functions registered"));
    }
    Ok(Library { name, code: code.to_vec(), functions })
}

/// Redis's `functionExtractLibMetaData`: the library's name from the
/// `#!<engine> name=<name>` line, and where the code after it starts (at
/// the line's end, so that line numbers stay the user's).
fn metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let end = code.iter().position(|&b| b == b'\n').ok_or("ERR Invalid library metadata")?;
    // Redis splits the line with `sdssplitargs`: `name="a b"` is one word.
    let parts = keel_protocol::split_args(&code[..end]).filter(|p| !p.is_empty()).ok_or("ERR Invalid library metadata")?;
    let engine = String::from_utf8_lossy(parts[0].get(2..).unwrap_or_default()).into_owned();
    let mut name = None;
    for part in &parts[1..] {
        match part.get(..5) {
            Some(prefix) if prefix.eq_ignore_ascii_case(b"name=") => {
                if name.is_some() {
                    return Err("ERR Invalid metadata value, name argument was given multiple times".into());
                }
                name = Some(String::from_utf8_lossy(&part[5..]).into_owned());
            }
            _ => return Err(format!("ERR Invalid metadata value given: {}", String::from_utf8_lossy(part))),
        }
    }
    let name = name.ok_or("ERR Library name was not given")?;
    if !valid_name(&name) {
        return Err(
            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into(),
        );
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    Ok((name, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shebang line names the library; the code after it starts at
    /// the line's end, so that its line numbers stay the user's.
    #[test]
    fn metadata_names_the_library_as_redis_reads_it() {
        assert_eq!(metadata(b"#!lua name=mylib\nreturn 1"), Ok(("mylib".into(), 16)));
        assert_eq!(metadata(b"#!LUA NAME=x \n"), Ok(("x".into(), 13)));
        assert_eq!(metadata(b"return 1"), Err("ERR Missing library metadata".into()));
        assert_eq!(metadata(b"#!lua name=x"), Err("ERR Invalid library metadata".into()));
        assert_eq!(metadata(b"#!lua\n"), Err("ERR Library name was not given".into()));
        assert_eq!(metadata(b"#!lua name=a name=b\n"), Err("ERR Invalid metadata value, name argument was given multiple times".into()));
        assert_eq!(metadata(b"#!lua version=1 name=a\n"), Err("ERR Invalid metadata value given: version=1".into()));
        assert!(metadata(b"#!lua name=a-b\n").is_err_and(|e| e.starts_with("ERR Library names can only contain")));
        // Quoted as Redis's sdssplitargs reads them.
        assert_eq!(metadata(b"#!lua name=\"x\"\n"), Ok(("x".into(), 14)));
        assert!(metadata(b"#!lua name=\"a b\"\n").is_err_and(|e| e.starts_with("ERR Library names can only contain")));
        assert_eq!(metadata(b"#!lua name='a\n"), Err("ERR Invalid library metadata".into()));
        assert_eq!(metadata(b"#!js name=a\n"), Err("ERR Engine 'js' not found".into()));
        let library = Library { name: "a".into(), code: b"#!lua name=a\nx".to_vec(), functions: vec![] };
        assert_eq!(library.body(), b"\nx");
    }
}
