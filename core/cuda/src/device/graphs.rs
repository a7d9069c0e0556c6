//! A jit program's replays as CUDA graphs: one launch enqueues a whole
//! step rather than one call per kernel. A graph holds the addresses it
//! was captured with, so one is kept per set of addresses the replays
//! bind. Each output of a program takes back the buffer it had two
//! replays before (`program.rs`), so a training loop's replays alternate
//! between two sets (a step's outputs are the next one's inputs); a set is
//! captured the second time it is seen, and replayed from then on.
//! `KILN_CUDA_GRAPHS=0` turns graphs off. An equal address is the same
//! allocation only because the device's pool frees nothing while the
//! device lives: a pool that trimmed itself would have to drop the graphs.

use super::engine::{Call, Engine, Graph};
use kiln_ir::error::Result;

/// Address sets remembered per program (graphs or first sightings).
const KEPT: usize = 8;

/// Failed captures after which a program stops trying (one may fail on
/// an error another call left in the context rather than on the capture).
const CAPTURE_TRIES: u32 = 3;

struct Entry {
    addresses: Vec<u64>,
    graph: Option<Box<dyn Graph>>,
}

/// The graphs of one program, most recently used first.
pub(super) struct Graphs {
    entries: Vec<Entry>,
    /// Graphs turned off: calls are enqueued one by one.
    off: bool,
    failed_captures: u32,
}

/// How a replay was enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Enqueued {
    Calls,
    Graph,
}

impl Graphs {
    /// None yet; off where env `KILN_CUDA_GRAPHS` is `0`.
    pub fn new() -> Graphs {
        let off = std::env::var("KILN_CUDA_GRAPHS").is_ok_and(|v| v == "0");
        Graphs { entries: Vec::new(), off, failed_captures: 0 }
    }

    /// Whether replays may run as graphs.
    pub fn on(&self) -> bool {
        !self.off
    }

    /// Enqueue `calls` on `engine`: through the graph captured for their
    /// addresses, capturing it if they were seen before, else one by one.
    ///
    /// # Safety
    /// As [`Engine::enqueue`]; the caller holds the device's enqueue order.
    pub unsafe fn enqueue(&mut self, engine: &dyn Engine, calls: &[Call]) -> Result<Enqueued> {
        let addresses: Vec<u64> = calls.iter().flat_map(Call::addresses).collect();
        let seen = self.entries.iter().position(|e| e.addresses == addresses);
        let mut entry = match seen {
            Some(i) => self.entries.remove(i),
            None => Entry { addresses, graph: None },
        };
        if seen.is_some() && entry.graph.is_none() && !self.off {
            // SAFETY: the caller's promise covers the graph's launches
            // while these addresses are the ones replays bind.
            match unsafe { engine.capture(calls) } {
                Ok(graph) => entry.graph = Some(graph),
                Err(e) => {
                    self.failed_captures += 1;
                    self.off = self.failed_captures >= CAPTURE_TRIES;
                    let then =
                        if self.off { "this program enqueues its calls from now on" } else { "tried again later" };
                    log::warn!("jit on CUDA: a graph capture failed ({e}); {then}");
                }
            }
        }
        // SAFETY: the caller's promise, for the calls and their graph alike.
        let enqueued = match &entry.graph {
            Some(graph) => unsafe { graph.launch() }.map(|()| Enqueued::Graph),
            None => unsafe { engine.enqueue(calls) }.map(|()| Enqueued::Calls),
        };
        self.entries.insert(0, entry);
        self.entries.truncate(KEPT);
        enqueued
    }
}
