//! Result callbacks: the signed webhook a worker sends when a result is stored, and the rules for where one may go.

pub mod outbound;
pub mod webhook;
