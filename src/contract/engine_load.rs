//! How busy an engine is: the requests it is generating for and those waiting inside it (the engine adapter
//! reads it from the engine's own gauges; the worker's in-flight limit and the scaler use it).

/// Requests the engine is generating for, and requests it holds waiting for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineLoad {
    pub running: u64,
    pub waiting: u64,
    /// Whether this engine stops a request once its client hangs up, freeing its slot or its place in the queue
    /// (then the worker may take a request back, see `preemption`).
    pub(crate) drops_abandoned: bool,
}
